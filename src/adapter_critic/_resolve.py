"""Override checks, stage-target resolution and credential binding (SPEC §4).

Credentials are bound to URLs: a configured key is only ever sent to the `base_url` it is
configured with, so no request can make the server send a secret to a host the operator did not
configure. Everything here is pure: it reads the config and the request, never the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._config import Config, Mode, ServedModel, Target, normalize_url
from ._exceptions import RequestError
from ._prompts import DEFAULT_ADAPTER_SYSTEM_PROMPT, DEFAULT_CRITIC_SYSTEM_PROMPT
from ._request import Overrides


@dataclass(frozen=True, slots=True)
class StageTarget:
    """Where one stage's upstream call goes, and the env var (if any) whose value is its bearer token."""

    model: str
    base_url: str
    key_env: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.model}@{self.base_url}"


@dataclass(frozen=True, slots=True)
class Plan:
    """A request's resolved workflow: the mode and every stage target it uses."""

    served_id: str
    mode: Mode
    api: StageTarget
    adapter: StageTarget | None = None
    critic: StageTarget | None = None
    max_adapter_retries: int = 0
    on_review_error: str = "draft"
    adapter_system_prompt: str = DEFAULT_ADAPTER_SYSTEM_PROMPT
    critic_system_prompt: str = DEFAULT_CRITIC_SYSTEM_PROMPT


def check_overrides(config: Config, overrides: Overrides | None, where: str = "x_adapter_critic") -> None:
    """The override checks that need no served model (400): overrides enabled, `*_base_url` allowlist."""
    if overrides is None:
        return
    if not config.allow_overrides:
        raise RequestError(f"`{where}` overrides are disabled on this server (allow_overrides = false).", param=where)
    configured = {t.url for t in config.targets()}
    allowed = {normalize_url(url) for url in config.allowed_override_base_urls}
    for name, url in overrides.base_urls().items():
        normalized = normalize_url(url)
        if normalized in configured or normalized in allowed:
            continue
        if "*" in allowed and _is_http_url(normalized):
            continue
        raise RequestError(
            f"`{where}.{name}`: {url!r} is not an allowed upstream URL. It must be one of the configured "
            "base_urls, or be listed in the server's allowed_override_base_urls.",
            param=f"{where}.{name}",
        )


def resolve(config: Config, served_id: str, overrides: Overrides | None, where: str = "x_adapter_critic") -> Plan:
    """Resolve the served model (404 if unknown) and every stage target its mode uses (400 on a partial target).

    `where` is the overrides' place in the request, for error messages (see `ChatRequest.overrides_param`)."""
    served = config.served_models.get(served_id)
    if served is None:
        raise RequestError(
            f"The model {served_id!r} does not exist on this server. Served models: "
            f"{', '.join(sorted(config.served_models))}.",
            status_code=404,
            param="model",
            code="model_not_found",
        )
    ov = overrides or Overrides()
    mode: Mode = ov.mode or served.mode
    api = _stage(config, served.api, ov.api_model, ov.api_base_url, "api", where)
    assert api is not None  # the api target is always configured
    adapter = critic = None
    if mode == "adapter":
        adapter = _stage(config, served.adapter, ov.adapter_model, ov.adapter_base_url, "adapter", where) or api
    elif mode == "critic":
        critic = _stage(config, served.critic, ov.critic_model, ov.critic_base_url, "critic", where) or api
    return Plan(
        served_id=served_id,
        mode=mode,
        api=api,
        adapter=adapter,
        critic=critic,
        max_adapter_retries=(
            ov.max_adapter_retries if ov.max_adapter_retries is not None else served.max_adapter_retries
        ),
        on_review_error=served.on_review_error,
        adapter_system_prompt=_prompt(served, "adapter_system_prompt", DEFAULT_ADAPTER_SYSTEM_PROMPT),
        critic_system_prompt=_prompt(served, "critic_system_prompt", DEFAULT_CRITIC_SYSTEM_PROMPT),
    )


def bind_key(config: Config, url: str, own: Target | None) -> str | None:
    """The env var whose value may be sent to `url`: the stage's own target's when the URL is its own,
    else that of the first configured target with this URL, else none (no `Authorization` at all)."""
    url = normalize_url(url)
    if own is not None and own.url == url:
        return config.key_env_for(own)
    for target in config.targets():
        if target.url == url:
            return config.key_env_for(target)
    return None


def _stage(
    config: Config, own: Target | None, model: str | None, base_url: str | None, stage: str, where: str
) -> StageTarget | None:
    if own is None:
        if model is None and base_url is None:
            return None  # caller falls back to the api target
        if model is None or base_url is None:
            given, missing = ("model", "base_url") if model is not None else ("base_url", "model")
            raise RequestError(
                f"`{where}.{stage}_{given}` was given without `{stage}_{missing}`, but this served model "
                f"has no configured {stage} target to complete it; give both.",
                param=f"{where}.{stage}_{missing}",
            )
        url = normalize_url(base_url)
        # A target made wholly from the request gets no options of the config.
        return StageTarget(model=model, base_url=url, key_env=bind_key(config, url, None))
    url = normalize_url(base_url) if base_url is not None else own.url
    return StageTarget(
        model=model if model is not None else own.model,
        base_url=url,
        key_env=bind_key(config, url, own),
        options=own.options,
    )


def _prompt(served: ServedModel, name: str, default: str) -> str:
    value: str | None = getattr(served, name)
    return value if value is not None else default


def _is_http_url(url: str) -> bool:
    return url.startswith(("http://", "https://"))
