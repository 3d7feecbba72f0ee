"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A request's plan, the run's input: override checks, stage-target resolution and credential binding
(docs/guides/overrides.md, docs/guides/security.md).

Credentials are bound to URLs: a configured key is only ever sent to the `base_url` it is
configured with, so no request can make the server send a secret to a host the operator did not
configure. Everything here is pure: it reads the config and the request, never the network (an override
host name is resolved and checked by `upstream.pinning`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import msgspec

from ..config import Config, ServedModel, Target, normalize_url
from ..config.models import composed
from ..core import DRAFT, Plan, StageTarget
from ..errors import RequestError
from ..redact import redact_userinfo
from ..request.decode import locate
from ..request.overrides import Overrides
from ..upstream.urlguard import needs_resolution, override_url_problem, parse_url
from ..workflows import registry
from ..workflows.base import Workflow


def check_overrides(
    config: Config, overrides: Overrides | None, where: str = "x_adapter_critic"
) -> tuple[tuple[str, str], ...]:
    """The override checks that need no served model (400): overrides enabled, `*_base_url` allowlist.

    Returns the `(param, url)` of every override URL only `"*"` allows that names its host: its addresses are
    still to be checked (`upstream.pinning.HostGuard`). Empty for every other request, which pays nothing more."""
    if overrides is None:
        return ()
    if not config.allow_overrides:
        raise RequestError(f"`{where}` overrides are disabled on this server (allow_overrides = false).", param=where)
    allowed = {normalize_url(url) for url in config.allowed_override_base_urls}
    to_resolve: list[tuple[str, str]] = []
    for name, url in overrides.base_urls().items():
        normalized = normalize_url(url)
        if config.first_target(normalized) is not None:  # a configured base_url
            continue
        shown = redact_userinfo(url)
        if parse_url(normalized) is None:  # whatever the allowlist: no upstream call could be made with it
            raise RequestError(f"`{where}.{name}`: {shown!r} is not a valid URL.", param=f"{where}.{name}")
        if normalized in allowed:
            continue
        if "*" in allowed:
            problem = override_url_problem(normalized)
            if problem is None:
                if needs_resolution(normalized):
                    to_resolve.append((f"{where}.{name}", normalized))
                continue
            raise RequestError(
                f'`{where}.{name}`: {shown!r} {problem}, which allowed_override_base_urls = ["*"] does not '
                "cover; the server's operator can list the URL explicitly to allow it.",
                param=f"{where}.{name}",
            )
        raise RequestError(
            f"`{where}.{name}`: {shown!r} is not an allowed upstream URL. It must be one of the configured "
            "base_urls, or be listed in the server's allowed_override_base_urls.",
            param=f"{where}.{name}",
        )
    return tuple(to_resolve)


def resolve(
    config: Config,
    served_id: str,
    overrides: Overrides | None,
    where: str = "x_adapter_critic",
    *,
    client_token: str | None = None,
) -> Plan:
    """Resolve the served model (404 if unknown) and every stage target its mode uses (400 on a partial target).

    `served_id` is a served model's id, or a prefixed one (`critic-<model>`, `[models]`). `where` is the overrides'
    place in the request, for error messages (see `ChatRequest.overrides_param`). `client_token` is the caller's
    bearer token, kept only on targets that forward it."""
    served = config.served(served_id)
    if served is None:
        raise unknown_model(served_id, config.served_models, reason=why_not_served(config, served_id))
    ov = overrides or Overrides()
    mode = ov.mode or served.mode
    workflow = registry.get(mode)
    api = _role(config, served, "api", ov, where, client_token)
    assert api is not None  # the api target is always configured
    targets: dict[str, StageTarget] = {}
    roles = (*workflow.targets, *workflow.settings_targets(served.settings))
    if workflow.reviews_draft and DRAFT in served.served:
        roles = (DRAFT, *roles)
    for role in roles:
        resolved = _role(config, served, role, ov, where, client_token)
        if resolved is not None:
            targets[role] = resolved
    settings = _settings(served, workflow, ov, where)
    return Plan(served_id, mode, api, targets, settings, served.on_review_error)


def _role(
    config: Config, served: ServedModel, role: str, overrides: Overrides, where: str, token: str | None
) -> StageTarget | None:
    """The stage target of `role`: configured (a target, or another served model's run), overridden, or None (the
    caller falls back to the API target)."""
    model, url = overrides.target(role)
    ref = served.served.get(role)
    if ref is None:
        own = served.api if role == "api" else served.targets.get(role)
        return _stage(config, own, model, url, role, where, token)
    if model is None and url is None:
        return StageTarget.of_served(ref)
    if model is None or url is None:  # replacing another served model's run takes a whole target
        given, missing = ("model", "base_url") if model is not None else ("base_url", "model")
        raise RequestError(
            f"`{where}.{role}_{given}` was given without `{where}.{role}_{missing}`, but this served model's {role} "
            f"stage is the served model {ref!r}; give both to replace it.",
            param=f"{where}.{role}_{missing}",
        )
    return _stage(config, None, model, url, role, where, token)


def _settings(served: ServedModel, workflow: Workflow, overrides: Overrides, where: str) -> msgspec.Struct:
    """The workflow's settings: the served model's keys (validated at load), then the request's overrides of those
    it lets a request choose (validated as it declares them, `RequestSettings`, and within the served model's
    `request_limits`)."""
    keys = workflow.Settings.__struct_fields__
    given = {key: value for key, value in served.settings.items() if key in keys}
    chosen = overrides.settings(workflow)
    for key, value in chosen.items():
        limit = served.request_limits.get(key)
        size = len(value) if isinstance(value, list) else value
        if limit is not None and isinstance(size, int | float) and size > limit:
            what = f"{size} items" if isinstance(value, list) else repr(value)
            raise RequestError(
                f"`{where}.{key}`: {what} is over this served model's limit, request_limits.{key} = {limit}.",
                param=f"{where}.{key}",
                code="over_limit",
            )
    given.update((key, msgspec.to_builtins(value)) for key, value in chosen.items() if key in keys)
    try:
        return msgspec.convert(given, workflow.Settings)
    except msgspec.ValidationError as exc:  # a plug-in whose `RequestSettings` is looser than its `Settings`
        message, param = locate(str(exc), where)
        raise RequestError(f"`{param}`: {message}.", param=param) from None


def why_not_served(config: Config, served_id: str) -> str | None:
    """Why a prefixed model name (`[models]`) that names workflows is not served; None for any other name."""
    made = composed(config, served_id)
    return made if isinstance(made, str) else None


def unknown_model(served_id: str, served: Iterable[str], *, reason: str | None = None) -> RequestError:
    """The 404 for a model this server does not serve, listing the ones it does (and, for a prefixed name that
    names workflows but cannot be served, why)."""
    why = f" ({reason})" if reason else ""
    return RequestError(
        f"The model {served_id!r} does not exist on this server{why}. Served models: {', '.join(sorted(served))}.",
        status_code=404,
        param="model",
        code="model_not_found",
    )


def bind_key(config: Config, url: str, own: Target | None) -> str | None:
    """The env var whose value may be sent to `url`: the stage's own target's when the URL is its own,
    else that of the first configured target with this URL, else none (no `Authorization` at all)."""
    bound = bind_target(config, url, own)
    if bound is None or bound.forward_client_authorization:  # a forwarding target never gets the server's key
        return None
    return config.key_env_for(bound)


def bind_target(config: Config, url: str, own: Target | None) -> Target | None:
    """The configured target whose credentials (its key, or forwarding the caller's) apply to `url`: the
    stage's own target when the URL is its own, else the first configured target with this URL, else none."""
    url = normalize_url(url)
    if own is not None and own.url == url:
        return own
    return config.first_target(url)


def _stage(
    config: Config,
    own: Target | None,
    model: str | None,
    base_url: str | None,
    stage: str,
    where: str,
    client_token: str | None = None,
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
        return _credentials(config, StageTarget(model=model, base_url=url), None, client_token)
    url = normalize_url(base_url) if base_url is not None else own.url
    target = _configured(own, model=model, base_url=url)
    # Each fallback is bound to its own URL: its key goes only there, and the primary's never does.
    fallbacks = tuple(_credentials(config, _configured(f), f, client_token) for f in own.fallbacks)
    return replace(_credentials(config, target, own, client_token), fallbacks=fallbacks)


def _configured(own: Target, *, model: str | None = None, base_url: str | None = None) -> StageTarget:
    """A configured target as a stage target, before credentials (see `_credentials`)."""
    return StageTarget(
        model=model or own.model,
        base_url=base_url or own.url,
        options=own.options,
        retries=own.retries,
        timeout_seconds=own.timeout_seconds,
        connect_timeout_seconds=own.connect_timeout_seconds,
        protocol=own.protocol,
    )


def _credentials(config: Config, target: StageTarget, own: Target | None, client_token: str | None) -> StageTarget:
    """`target` with the credentials bound to its URL: the server's key, or (forwarding) the caller's token."""
    bound = bind_target(config, target.base_url, own)
    if bound is None:
        return target
    if bound is not own:  # a URL the config knows speaks the protocol configured for it
        target = replace(target, protocol=bound.protocol)
    if bound.forward_client_authorization:
        return replace(target, forward_client_authorization=True, client_token=client_token)
    return replace(target, key_env=config.key_env_for(bound))
