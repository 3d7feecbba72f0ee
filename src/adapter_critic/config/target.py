"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A stage target: one upstream a stage's calls go to (docs/reference/config.md#target), and the URL forms credentials
are bound to."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ..protocols import registry as protocols


class Target(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One upstream: the model to ask, where, and which env var holds its bearer token. A stage target may instead
    name another served model, `{ served = "<id>" }`, whose whole workflow then runs as that stage."""

    model: Annotated[str, msgspec.Meta(min_length=1)]
    """The model name sent upstream."""
    base_url: Annotated[str, msgspec.Meta(min_length=1)]
    """The upstream's base URL (`…/v1`; `/chat/completions` is appended). A path such as `"/v1"` is served
    in-process by the app `AdapterCriticMiddleware` wraps, and works only there."""
    api_key_env: str | None = None
    """The env var holding this target's key (sent as `Authorization: Bearer`, or `x-api-key` to Anthropic);
    not set: `default_api_key_env`. An unset or empty variable sends no key."""
    api_key_var: str | None = None
    """Another name for `api_key_env`, kept for configs written for the original adapter_critic."""
    options: dict[str, Any] = {}
    """A table merged into every request body this target is sent (`temperature`, `max_tokens`, …)."""
    forward_client_authorization: bool = False
    """Send the caller's own key to this target, and never the server's (callers bring their own keys). Not
    allowed together with `auth_api_keys_env`."""
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] | None = None
    """How often a failed call to this target is retried; not set: the top-level `retries`."""
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The timeout of each call to this target; not set: the top-level `timeout_seconds`."""
    connect_timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The timeout for opening a connection to this target; not set: the top-level `connect_timeout_seconds`."""
    fallbacks: list[Target] = []
    """Other targets (same keys, no `fallbacks` of their own) tried in order once this one's retries are
    exhausted; each one's key is sent only to its own `base_url`."""
    protocol: str = protocols.DEFAULT
    """The API the target speaks: `"openai"` (chat completions) or `"anthropic"` (Messages, at
    `{base_url}/messages`), or a protocol a plug-in registers."""

    def __post_init__(self) -> None:
        if self.protocol != protocols.DEFAULT and self.protocol not in protocols.upstream_names():
            known = ", ".join(map(repr, protocols.upstream_names()))
            raise ValueError(f"unknown protocol {self.protocol!r}; must be one of {known}")
        if any(fallback.fallbacks for fallback in self.fallbacks):
            raise ValueError("a fallback cannot have `fallbacks` of its own; list them all, in order, on the primary")
        if self.api_key_var is not None:
            if self.api_key_env is not None and self.api_key_env != self.api_key_var:
                raise ValueError("`api_key_env` and its alias `api_key_var` disagree; give only one")
            msgspec.structs.force_setattr(self, "api_key_env", self.api_key_var)
            msgspec.structs.force_setattr(self, "api_key_var", None)

    @property
    def url(self) -> str:
        """`base_url` without a trailing slash: the form credentials are bound to."""
        return normalize_url(self.base_url)


def normalize_url(url: str) -> str:
    return url.rstrip("/")


def is_relative(url: str) -> bool:
    """A `base_url` that is a path, served in-process by the wrapped app (middleware only)."""
    return url.startswith("/")
