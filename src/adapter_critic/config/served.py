"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A served model (`[served_models.<id>]`) and reading one from its flat table: `mode`, `api`, `on_review_error`,
`limits`, `cache`, `cache_ttl_seconds`, `request_limits`, and the registered workflows' stage-target and settings
keys beside them.

A stage target is a target table, or another served model (`critic = { served = "demo-critic" }`): that stage then
runs the other served model's whole workflow in-process (docs/guides/workflows.md#composing-workflows). Whether those
references resolve, without a cycle and within `MAX_NESTING`, is the whole config's to check (`config.nesting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from ..core import DRAFT
from ..errors import ConfigError
from ..workflows import registry
from .describe import convert
from .learning import Learning
from .limits import RateLimits
from .routing import Route, Shadow
from .target import Target


class ServedRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A stage target that is another served model: `{ served = "<id>" }`."""

    served: Annotated[str, msgspec.Meta(min_length=1)]


class ServedModel(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A model id clients can ask for, and the workflow that answers it.

    In a config file the workflows' own keys stand beside `mode` and `api` (`critic = {...}`,
    `critic_system_prompt = "..."`); loading sorts them into `targets` (stage targets by key), `served` (stages
    another served model runs) and `settings` (validated by every registered workflow that reads them)."""

    mode: str
    """The workflow that answers this model: `direct`, `adapter`, `critic`, `advisor`, `panel`, `best_of_n`,
    `self_consistency`, `self_refine`, `re2`, `mixture_of_agents`, `chain_of_verification`, or a mode a workflow
    plug-in registers."""
    api: Target | None = None
    """The API model's target: it writes the drafts and the answers. Required, as a target table or as another
    served model (`api = { served = "<id>" }`)."""
    on_review_error: Literal["draft", "fail"] = "draft"
    """What a reviewer stage's failure does: `"draft"` answers with the answer so far (marked degraded), `"fail"`
    fails the request."""
    limits: RateLimits = RateLimits()
    """RateLimits on this served model, all callers together (docs/guides/limits.md)."""
    cache: bool = False
    """Answer repeated requests from the exact-match cache (docs/guides/cache.md): a request that is deterministic
    (`temperature = 0`) or asks for it (`x_adapter_critic.cache = true`) and matches an earlier answer exactly is
    answered with that answer, without an upstream call."""
    cache_ttl_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """How long this model's cached answers are served. Not set: `[cache] ttl_seconds` (a day)."""
    request_limits: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = {}
    """Caps on the settings a request may choose (`x_adapter_critic`): a number's largest value, a list's most
    items (`{ n = 4, lenses = 3 }`); a request over one is answered 400 naming it."""
    targets: dict[str, Target] = {}
    """The other stage targets by key (`critic`, …): written beside `mode` in a config file."""
    served: dict[str, str] = {}
    """The stages another served model runs, by stage-target key (`api`, `critic`, `draft`, `lens:<name>`…): written
    as `critic = { served = "<id>" }` beside `mode`."""
    settings: dict[str, Any] = {}
    """The workflows' settings by key (`critic_system_prompt`, …): written beside `mode` in a config file."""
    learning: Learning | None = None
    """Reviewers that learn from the feedback on this model's runs (docs/guides/learning.md): `{ learner =
    "<served model>" }`, and optionally `max_lessons`, `holdout`, `scorer`."""
    route: Route | None = None
    """An `auto` model's candidates, rules, classes and cost dial (docs/guides/routing.md): written as `mode =
    "auto"` with `candidates`, `rules`, `classes`, `effort`, `explore` beside it. Its runs are direct runs whose API
    stage is the chosen candidate's run."""
    shadow: Shadow | None = None
    """A candidate that answers a share of this model's requests in the background, judged against the live answer
    (docs/guides/routing.md#shadow-evaluation)."""

    @property
    def kind(self) -> str:
        """The mode as a config file says it: `auto` for an `auto` model, else `mode`."""
        return "auto" if self.route is not None else self.mode

    def references(self) -> list[tuple[str, str]]:
        """The other served models (or prefixed names) this one runs: its served stages, and an `auto` model's
        candidates (as `candidate:<name>`)."""
        found = list(self.served.items())
        if self.route is not None:
            found += [(f"candidate:{c}", c) for c in self.route.candidates if c != self.served.get("api")]
        return found

    def __post_init__(self) -> None:
        if self.mode not in registry.workflows():
            raise ValueError(
                f"unknown mode {self.mode!r}; must be one of {', '.join(map(repr, registry.names()))}, or 'auto'"
            )
        if (self.api is None) == ("api" not in self.served):
            raise ValueError('`api` is required: a target table, or another served model as { served = "<id>" }')
        if DRAFT in self.served and not registry.get(self.mode).reviews_draft:
            drafting = ", ".join(name for name, w in registry.workflows().items() if w.reviews_draft)
            raise ValueError(f"a `draft` stage needs a workflow that reviews a draft ({drafting}), not {self.mode!r}")
        for key in self.request_limits:
            if key not in registry.limitable():
                known = ", ".join(registry.limitable())
                raise ValueError(
                    f"request_limits.{key}: not a setting a request may choose; these may be capped: {known}"
                )

    def stage_targets(self) -> list[tuple[str, Target | str]]:
        """Each configured stage target by key, `api` first: a target, or the id of the served model it runs."""
        api: list[tuple[str, Target | str]] = [("api", self.api if self.api is not None else self.served["api"])]
        return [*api, *self.targets.items(), *((k, v) for k, v in self.served.items() if k != "api")]


_SERVED_KEYS = (
    "mode",
    "api",
    "on_review_error",
    "limits",
    "cache",
    "cache_ttl_seconds",
    "request_limits",
    "learning",
    "shadow",
)
_ROUTE_KEYS = ("candidates", "rules", "classes", "effort", "explore", "refresh_seconds")


def served_model(data: Any, source: str, where: str) -> ServedModel:
    """A served model from its flat table: `mode`, `api`, `on_review_error`, `limits`, `cache`, `cache_ttl_seconds`,
    `request_limits`, and the
    registered workflows' target and settings keys, each validated where it is read."""
    if not isinstance(data, Mapping):
        return convert(data, ServedModel, source, where)
    if data.get("mode") == "auto":
        return _auto_model(data, source, where)
    if "api" not in data:
        raise ConfigError(f'{source}: {where}.api: required key is missing (a target table, or {{ served = "<id>" }})')
    target_keys = registry.target_keys()
    settings_keys = {key for w in registry.workflows().values() for key in w.Settings.__struct_fields__}
    base: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    paths: dict[str, str] = {}  # a target given inside a setting: its key path (`lenses[0].target`)
    for key, value in data.items():
        if key in _SERVED_KEYS and not (key == "api" and _is_ref(value)):
            base[key] = value
        elif key in ("api", DRAFT, *target_keys) and not (isinstance(value, bool) and key in settings_keys):
            targets[key] = value  # (`coordinator = false` is a setting: that stage is turned off)
        elif key in settings_keys:
            settings[key] = value
        else:
            known = ", ".join((*_SERVED_KEYS, DRAFT, *target_keys, *sorted(settings_keys)))
            raise ConfigError(f"{source}: {where}.{key}: unknown key; known keys here: {known}")
    for workflow in registry.workflows().values():
        keys = workflow.Settings.__struct_fields__
        convert({k: v for k, v in settings.items() if k in keys}, workflow.Settings, source, where)
        for key, (path, value) in workflow.settings_targets(settings).items():  # a panel lens's own `target`
            targets[key] = value
            paths[key] = path
    for key, value in targets.items():
        path = f"{where}.{paths.get(key, key)}"
        if _is_ref(value):
            base.setdefault("served", {})[key] = convert(value, ServedRef, source, path).served
        elif key == DRAFT:
            raise ConfigError(f'{source}: {path}: a draft stage is another served model: {{ served = "<id>" }}')
        else:
            base.setdefault("targets", {})[key] = convert(value, Target, source, path)
    if settings:
        base["settings"] = settings
    # Targets in the order the workflows declare their keys: the order credentials are bound in.
    if "targets" in base:
        given = base["targets"]
        base["targets"] = {key: given[key] for key in (*target_keys, *given) if key in given}
    return convert(base, ServedModel, source, where)


def _auto_model(data: Mapping[str, Any], source: str, where: str) -> ServedModel:
    """An `auto` model: a direct model whose API stage is, per request, one of its candidates' runs (the first
    until a request is routed)."""
    own = {k: v for k, v in data.items() if k not in _ROUTE_KEYS and k != "mode"}
    allowed = ("limits", "request_limits", "shadow", "cache", "cache_ttl_seconds")
    for key in own:
        if key not in allowed:
            known = ", ".join(("mode", *_ROUTE_KEYS, *allowed))
            raise ConfigError(f"{source}: {where}.{key}: not a key of an auto model; known keys here: {known}")
    route = convert({k: v for k, v in data.items() if k in _ROUTE_KEYS}, Route, source, where)
    base = {**own, "mode": "direct", "served": {"api": route.candidates[0]}}
    return msgspec.structs.replace(convert(base, ServedModel, source, where), route=route)


def _is_ref(value: Any) -> bool:
    """A stage target written as another served model (`{ served = "<id>" }`)."""
    return isinstance(value, Mapping) and "served" in value
