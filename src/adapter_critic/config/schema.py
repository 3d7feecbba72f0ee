"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The config's schema as msgspec Structs, and building a validated `Config` from parsed data
(docs/reference/config.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from ..errors import ConfigError
from ..pricing import Price, PricingConfig
from ..protocols import registry as protocols
from ..store.settings import StoreConfig
from ..workflows import registry
from .describe import convert
from .limits import AuthConfig, LimitsConfig, RateLimits
from .telemetry import TelemetryConfig

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_MESSAGES = 2048
DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_UPSTREAM_CONNECTIONS = 256


class Target(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One upstream: the model to ask, where, and which env var holds its bearer token."""

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


class ServedModel(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A model id clients can ask for, and the workflow that answers it.

    In a config file the workflows' own keys stand beside `mode` and `api` (`critic = {...}`,
    `critic_system_prompt = "..."`); loading sorts them into `targets` (stage targets by key) and `settings`
    (validated by every registered workflow that reads them)."""

    mode: str
    """The workflow that answers this model: `direct`, `adapter`, `critic`, `advisor`, `panel`, `best_of_n`,
    `self_consistency`, `self_refine`, `re2`, `mixture_of_agents`, `chain_of_verification`, or a mode a workflow
    plug-in registers."""
    api: Target
    """The API model's target: it writes the drafts and the answers."""
    on_review_error: Literal["draft", "fail"] = "draft"
    """What a reviewer stage's failure does: `"draft"` answers with the answer so far (marked degraded), `"fail"`
    fails the request."""
    targets: dict[str, Target] = {}
    """The other stage targets by key (`critic`, …): written beside `mode` in a config file."""
    settings: dict[str, Any] = {}
    """The workflows' settings by key (`critic_system_prompt`, …): written beside `mode` in a config file."""
    limits: RateLimits = RateLimits()
    """RateLimits on this served model, all callers together (docs/guides/quotas.md)."""

    def __post_init__(self) -> None:
        if self.mode not in registry.workflows():
            raise ValueError(f"unknown mode {self.mode!r}; must be one of {', '.join(map(repr, registry.names()))}")


_SERVED_KEYS = ("mode", "api", "on_review_error", "limits")


class UIConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The trace viewer: a web page over the run store at `GET /ui` under the mount."""

    enabled: bool | None = None
    """Serve the viewer; not set: on for the standalone server, off for a mounted app (the middleware has no
    viewer)."""


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True, dict=True):
    """The whole configuration; build it with `load_config(path)` or `Config.from_dict(data)`.

    A config remembers where it came from (`source_of`), so later checks name the file too."""

    served_models: Annotated[dict[str, ServedModel], msgspec.Meta(min_length=1)]
    """The models clients can ask for: served model id (what clients put in `model`) → served model."""
    default_api_key_env: str = "OPENAI_API_KEY"
    """The env var holding the key of a target that names no `api_key_env`."""
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    """The timeout of each upstream call; exceeded, the client gets a 504."""
    allow_overrides: bool = True
    """Whether requests may change their workflow with `x_adapter_critic`; `false` answers such a request 400."""
    allowed_override_base_urls: list[str] = []
    """More URLs a request override may point a stage at, besides the `base_url`s of the config; `["*"]` allows
    any `http(s)` URL on the internet, never this machine or its private networks."""
    max_body_bytes: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_BODY_BYTES
    """A larger request body is answered 413 (the middleware hands it to the wrapped app instead)."""
    keepalive_seconds: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """Streaming: a `: keep-alive` comment goes out whenever nothing was sent for this long."""
    auth_api_keys_env: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """Inbound auth: the env var holding the comma-separated keys callers must send; not set: no inbound auth."""
    max_messages: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_MESSAGES
    """A request with more messages (Responses API: `input` items) is answered 400."""
    max_upstream_response_bytes: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES
    """A larger upstream answer is refused with a 502 rather than buffered; a compressed answer counts decoded."""
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    """How often a failed upstream call is retried: connection errors, timeouts, 429, 500/502/503/504 and a 2xx
    answer that is not a completion; never another 4xx. A target's own `retries` wins."""
    retry_backoff_seconds: Annotated[float, msgspec.Meta(ge=0)] = 0.5
    """The base of the backoff between retries: retry *n* waits a random 50 to 100 % of `base * 2^(n-1)`."""
    retry_backoff_max_seconds: Annotated[float, msgspec.Meta(ge=0)] = 5.0
    """The longest wait between attempts, computed or asked for by an upstream's `Retry-After`; a longer
    `Retry-After` is not waited for (the fallbacks are tried, else the 429 is relayed)."""
    connect_timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """The timeout for opening a connection to an upstream; a target's own value wins."""
    request_timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The deadline of a whole request: stage calls still running are cancelled, and the client gets a 504, or
    the draft (degraded) when a reviewer was running and `on_review_error = "draft"`. Not set: no deadline."""
    max_concurrent_requests: Annotated[int, msgspec.Meta(gt=0)] | None = None
    """How many requests run at once; more wait for a slot. Not set: no limit."""
    queue_timeout_seconds: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    """How long a request waits for a slot before a 503 with `Retry-After`."""
    max_queued_requests: Annotated[int, msgspec.Meta(ge=0)] = 100
    """How many requests may wait for a slot at once; one more is answered 503 with `Retry-After` at once
    (`0`: no waiting)."""
    max_upstream_connections: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_UPSTREAM_CONNECTIONS
    """The size of the upstream connection pool, all upstreams together."""
    max_concurrent_calls_per_run: Annotated[int, msgspec.Meta(gt=0)] = 8
    """How many upstream calls one request may have in flight at once (a panel's lenses, best-of-n's
    candidates); the others wait for a slot."""
    shutdown_grace_seconds: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    """At shutdown, how long requests in flight may take to finish before the upstream client is closed."""
    cors_allowed_origins: list[str] = []
    """Browser origins allowed to call the API (CORS); preflights are answered without a key. Empty: CORS off."""
    passthrough: Target | None = None
    """The upstream every other request under the mount is relayed to (`/embeddings`, `/completions`, models this
    server does not serve…); `model` is unused. Not set: those paths are answered 404."""
    protocols: dict[str, dict[str, Any]] = {}
    """A protocol's own settings, as `[protocols.<name>]` tables."""
    store: StoreConfig = StoreConfig()
    """The run store and the runs API."""
    telemetry: TelemetryConfig = TelemetryConfig()
    """Prometheus metrics and OpenTelemetry tracing."""
    ui: UIConfig = UIConfig()
    """The trace viewer at `/ui` under the mount."""
    prices: dict[Annotated[str, msgspec.Meta(min_length=1)], Price] = {}
    """What the upstream models cost, as `[prices."<model or glob>"]` tables: a model's price is the entry named
    exactly as the target's `model`, else the first entry in file order whose name matches it as a glob
    (`"gpt-4o-mini*"` before `"gpt-4o*"`). A model with no price costs unknown, never 0; no prices: no cost is
    computed (docs/guides/cost.md)."""
    pricing: PricingConfig = PricingConfig()
    """The currency of `[prices]`."""
    auth: AuthConfig = AuthConfig()
    """Named inbound keys with their own limits (`[[auth.keys]]`, docs/guides/quotas.md)."""
    limits: LimitsConfig = LimitsConfig()
    """Where the limits' counters are kept (docs/guides/quotas.md)."""

    def __post_init__(self) -> None:
        for name, given in self.protocols.items():
            if name not in protocols.names():
                known = ", ".join(map(repr, protocols.names()))
                raise ValueError(f"protocols.{name}: unknown protocol; must be one of {known}")
            try:
                protocols.settings_of(name, given)
            except msgspec.ValidationError as exc:
                raise ValueError(f"protocols.{name}: {exc}") from None
        if self.passthrough is not None and self.passthrough.protocol != protocols.DEFAULT:
            raise ValueError("passthrough.protocol: the passthrough relays OpenAI requests as they are; leave it out")
        budgeted = [f"auth.keys {k.name!r}" for k in self.auth.keys if k.limits.budgeted]
        budgeted += [f"served_models.{i}.limits" for i, m in self.served_models.items() if m.limits.budgeted]
        if budgeted and not self.prices:
            raise ValueError(
                f"{budgeted[0]}: a cost budget needs [prices] to know what runs cost (docs/guides/cost.md)"
            )
        inbound_envs = [("auth_api_keys_env", self.auth_api_keys_env)] if self.auth_api_keys_env else []
        inbound_envs += [(f"auth.keys {k.name!r}: key_env", k.key_env) for k in self.auth.keys if k.key_env]
        if not inbound_envs and not self.auth.keys:
            return
        upstream_key_envs = {self.default_api_key_env, *(t.api_key_env for t in self.targets() if t.api_key_env)}
        for where, env in inbound_envs:
            if env in upstream_key_envs:
                raise ValueError(
                    f"{where} = {env!r} also holds an upstream API key; callers would "
                    "have to present (and so know) that key. Give inbound keys their own env var."
                )
        for where, target in self.key_paths():
            if target.forward_client_authorization:
                # One `Authorization` header carries both: forwarding it would hand an upstream the very key
                # that lets callers into this server.
                raise ValueError(
                    f"{where}.forward_client_authorization cannot be used together with inbound auth "
                    "(auth_api_keys_env, auth.keys): the caller's Authorization header is then this server's own API "
                    "key, and forwarding it would send that key upstream. Run forwarding targets on a server "
                    "without inbound auth (protect it at the network level instead)."
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<config>") -> Config:
        """Validate already-parsed config data; errors name `source` and the key path."""
        data = dict(data)
        served = data.get("served_models")
        if isinstance(served, Mapping):
            if not served:
                raise ConfigError(
                    f"{source}: served_models: needs at least one served model, e.g. "
                    "[served_models.my-model] with `mode` and `api`"
                )
            for key in served:
                if not isinstance(key, str):
                    raise ConfigError(f"{source}: served_models: served model ids must be strings, got {key!r}")
            # Converted one by one so that errors name the served model id (msgspec says `[...]` for dict keys).
            data["served_models"] = {
                key: _served_model(value, source, f"served_models.{key}") for key, value in served.items()
            }
        prices = data.get("prices")
        if isinstance(prices, Mapping):
            data["prices"] = _prices(prices, source)
        config = convert(data, cls, source, "")
        config.__dict__["source"] = source
        return config

    def targets(self) -> list[Target]:
        """Every configured target in order: served models in file order; within each `api`, then the other
        stage targets in the order the workflows declare them (`adapter`, `critic`, …), each followed by its
        `fallbacks`; then the `passthrough` upstream."""
        return [target for _, target in self.key_paths()]

    def key_paths(self) -> list[tuple[str, Target]]:
        """Every configured target with its key path from the top (`served_models.x.api`, `passthrough`)."""
        found = [(f"served_models.{where}", target) for where, target in self.places()]
        if self.passthrough is not None:
            found.append(("passthrough", self.passthrough))
        return found

    def places(self) -> list[tuple[str, Target]]:
        """`targets()` with where each is below `served_models` (`x.api`, `x.api.fallbacks[0]`), for messages."""
        found: list[tuple[str, Target]] = []
        for served_id, served in self.served_models.items():
            for stage, target in [("api", served.api), *served.targets.items()]:
                found.append((f"{served_id}.{stage}", target))
                found += ((f"{served_id}.{stage}.fallbacks[{i}]", f) for i, f in enumerate(target.fallbacks))
        return found

    def key_env_for(self, target: Target) -> str:
        """The env var holding `target`'s bearer token."""
        return target.api_key_env or self.default_api_key_env

    def key_env_names(self) -> set[str]:
        """Every env var that may hold a secret (for redaction)."""
        names = {self.default_api_key_env, *(t.api_key_env for t in self.targets() if t.api_key_env)}
        if self.auth_api_keys_env:
            names.add(self.auth_api_keys_env)
        names.update(key.key_env for key in self.auth.keys if key.key_env)
        return names


def normalize_url(url: str) -> str:
    return url.rstrip("/")


def is_relative(url: str) -> bool:
    """A `base_url` that is a path, served in-process by the wrapped app (middleware only)."""
    return url.startswith("/")


def _served_model(data: Any, source: str, where: str) -> ServedModel:
    """A served model from its flat table: `mode`, `api`, `on_review_error`, and the registered workflows'
    target and settings keys, each validated where it is read."""
    if not isinstance(data, Mapping):
        return convert(data, ServedModel, source, where)
    target_keys = registry.target_keys()
    settings_keys = {key for w in registry.workflows().values() for key in w.Settings.__struct_fields__}
    base: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SERVED_KEYS:
            base[key] = value
        elif key in target_keys and not (isinstance(value, bool) and key in settings_keys):
            targets[key] = value  # (`coordinator = false` is a setting: that stage is turned off)
        elif key in settings_keys:
            settings[key] = value
        else:
            known = ", ".join((*_SERVED_KEYS, *target_keys, *sorted(settings_keys)))
            raise ConfigError(f"{source}: {where}.{key}: unknown key; known keys here: {known}")
    for key, value in targets.items():
        base.setdefault("targets", {})[key] = convert(value, Target, source, f"{where}.{key}")
    for workflow in registry.workflows().values():
        keys = workflow.Settings.__struct_fields__
        convert({k: v for k, v in settings.items() if k in keys}, workflow.Settings, source, where)
        for key, (path, value) in workflow.settings_targets(settings).items():  # a panel lens's own `target`
            base.setdefault("targets", {})[key] = convert(value, Target, source, f"{where}.{path}")
    if settings:
        base["settings"] = settings
    # Targets in the order the workflows declare their keys: the order credentials are bound in.
    if "targets" in base:
        given = base["targets"]
        base["targets"] = {key: given[key] for key in (*target_keys, *given) if key in given}
    return convert(base, ServedModel, source, where)


def _prices(prices: Mapping[Any, Any], source: str) -> dict[str, Price]:
    """`[prices]`, each entry converted on its own so that an error names it (`prices."gpt-4o".input`)."""
    found: dict[str, Price] = {}
    for key, value in prices.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f'{source}: prices: {key!r} is not a model name or glob; name a model, e.g. "gpt-4o*"')
        found[key] = convert(value, Price, source, f'prices."{key}"')
    return found
