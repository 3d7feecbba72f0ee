"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The config's schema as msgspec Structs, and building a validated `Config` from parsed data
(docs/reference/config.md)."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Any

import msgspec

from ..errors import ConfigError
from ..pricing import Price, PricingConfig
from ..protocols import registry as protocols
from ..store.settings import StoreConfig
from .cache import CacheConfig
from .describe import convert
from .limits import AuthConfig, LimitsConfig
from .models import ModelsConfig, composed
from .nesting import check_nesting, forwards_caller_key
from .served import ServedModel, served_model
from .target import Target
from .telemetry import TelemetryConfig

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_MESSAGES = 2048
DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_UPSTREAM_CONNECTIONS = 256


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
    models: ModelsConfig = ModelsConfig()
    """Model names beyond the served models: any workflow on any upstream model by a name prefix."""
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
    """Named inbound keys with their own limits (`[[auth.keys]]`, docs/guides/limits.md)."""
    limits: LimitsConfig = LimitsConfig()
    """Where the limits' counters are kept (docs/guides/limits.md)."""
    cache: CacheConfig = CacheConfig()
    """Where the exact-match cache keeps its answers (docs/guides/cache.md)."""

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
        check_nesting(self)
        for key in self.auth.keys:
            unmatched = [p for p in key.models or () if not any(fnmatchcase(m, p) for m in self.served_models)]
            if unmatched and not self.models.technique_prefixes:
                raise ValueError(
                    f"auth.keys {key.name!r}: models: {unmatched[0]!r} matches no served model (and prefixed names are "
                    "off), so it can never let a request through"
                )
        budgeted = [f"auth.keys {k.name!r}" for k in self.auth.keys if k.limits.budgeted]
        budgeted += [f"served_models.{i}.limits" for i, m in self.served_models.items() if m.limits.budgeted]
        if budgeted and not self.prices:
            raise ValueError(
                f"{budgeted[0]}: a cost budget needs [prices] to know what runs cost (docs/guides/cost.md)"
            )
        for served_id, served in self.served_models.items():
            if served.learning is not None and served.learning.learner not in self.served_models:
                known = ", ".join(self.served_models)
                raise ValueError(
                    f"served_models.{served_id}.learning.learner: {served.learning.learner!r} is no served model of "
                    f"this config ({known})"
                )
            shadow = served.shadow
            for what, name in () if shadow is None else (("candidate", shadow.candidate), ("judge", shadow.judge)):
                if self.served(name) is None:
                    raise ValueError(
                        f"served_models.{served_id}.shadow.{what}: {name!r} is not a served model of this config "
                        "(nor a prefixed model of [models])"
                    )
            for what, name in () if shadow is None else (("candidate", shadow.candidate), ("judge", shadow.judge)):
                if forwards_caller_key(self, name):
                    raise ValueError(
                        f"served_models.{served_id}.shadow.{what}: {name!r} forwards the caller's key upstream "
                        "(forward_client_authorization); a shadow is the operator's spend, never the caller's"
                    )
            if shadow is not None and shadow.budget_cost is not None and not self.prices:
                raise ValueError(f"served_models.{served_id}.shadow.budget_cost: a cost budget needs [prices]")
        cached = [served_id for served_id, served in self.served_models.items() if served.cache]
        if cached and self.cache.url is None and self.store.capture == "metadata":
            raise ValueError(
                f"served_models.{cached[0]}.cache: the cache keeps answers, and without [cache] url it keeps them in "
                'the run store, whose store.capture = "metadata" keeps no message text; give [cache] url (a Redis) '
                'or store.capture = "full"'
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
                key: served_model(value, source, f"served_models.{key}") for key, value in served.items()
            }
        prices = data.get("prices")
        if isinstance(prices, Mapping):
            data["prices"] = _prices(prices, source)
        config = convert(data, cls, source, "")
        config.__dict__["source"] = source
        return config

    def served(self, model_id: str) -> ServedModel | None:
        """The served model a client's `model` names: one of `served_models`, or a prefixed one (`[models]`)."""
        found = self.served_models.get(model_id)
        if found is not None:
            return found
        made = composed(self, model_id)
        return made if isinstance(made, ServedModel) else None

    def serves(self, model_id: str) -> bool:
        """Whether a request for `model_id` is this server's to answer (else it is unknown, or the passthrough's)."""
        return model_id in self.served_models or self.served(model_id) is not None

    def targets(self) -> list[Target]:
        """Every configured target in order: served models in file order; within each `api`, then the other
        stage targets in the order the workflows declare them (`adapter`, `critic`, …), each followed by its
        `fallbacks`; then the `passthrough` upstream."""
        return [target for _, target in self.key_paths()]

    def first_target(self, url: str) -> Target | None:
        """The first configured target (in `targets()`'s order) whose normalized URL is `url`; None when none is.
        Worked out once per config: every override that names a URL asks."""
        found: dict[str, Target] | None = self.__dict__.get("_first_targets")
        if found is None:
            found = {}
            for target in self.targets():
                found.setdefault(target.url, target)
            self.__dict__["_first_targets"] = found
        return found.get(url)

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
            api = [("api", served.api)] if served.api is not None else []  # else another served model's
            for stage, target in [*api, *served.targets.items()]:
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


def _prices(prices: Mapping[Any, Any], source: str) -> dict[str, Price]:
    """`[prices]`, each entry converted on its own so that an error names it (`prices."gpt-4o".input`)."""
    found: dict[str, Price] = {}
    for key, value in prices.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f'{source}: prices: {key!r} is not a model name or glob; name a model, e.g. "gpt-4o*"')
        found[key] = convert(value, Price, source, f'prices."{key}"')
    return found
