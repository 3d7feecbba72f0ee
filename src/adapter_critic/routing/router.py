"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The router of one `auto` model: per request, the first rule that holds, else the policy's choice for the request's
class under the cost dial, else the first candidate — with a share `explore` of the requests no rule decides sent to
another candidate, so every candidate keeps being measured. Its decision says why (`Decision.note`), for the run's
record. The policy is the service's to keep fresh (`Router.policy`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..config.routing import Route, Rule
from ..core import ChatRequest
from .features import Features, class_of, features_of, last_user_text
from .policy import Policy, choose


class Decision(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Which candidate answers a request, and why: `by` is `rule`, `policy`, `explore` or `default`."""

    candidate: str
    by: str
    request_class: str = msgspec.field(name="class")
    features: list[str] = []
    effort: float
    rule: int | None = None  # the index of the rule that decided
    expected_score: float | None = None
    expected_cost: float | None = None
    unit: str | None = None
    policy: int | None = None  # the version of the policy that decided (or that was explored around)
    measured_class: str | None = None  # the class whose measurements chose (absent: every class's)

    def note(self) -> dict[str, Any]:
        """The decision as the run's `route` note (JSON-ready)."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


class Router:
    """Decides for one `auto` model; `policy` is the latest one `route fit` stored (None: none yet)."""

    def __init__(self, route: Route, *, rng: Callable[[], float] = random.random) -> None:
        self.route = route
        self.policy: Policy | None = None
        self.checked_at = float("-inf")  # when the store was last asked for a newer policy (monotonic seconds)
        self._rng = rng

    def decide(
        self, request: ChatRequest, key: str | None, header: str | None, effort: float | None = None
    ) -> Decision:
        route = self.route
        text = last_user_text(request.messages)
        features = features_of(text, "tools" in request.options)
        request_class = class_of(features, text, route.classes)
        dial = route.effort if effort is None else effort
        named = features.names()
        for index, rule in enumerate(route.rules):
            if _holds(rule, request, key, header, features, request_class):
                return Decision(
                    candidate=rule.use, by="rule", request_class=request_class, features=named, effort=dial, rule=index
                )
        policy = self.policy
        chosen = None if policy is None else choose(policy, request_class, dial, route.candidates)
        candidates = route.candidates
        if chosen is None:
            decision = Decision(candidate=candidates[0], by="default", request_class=request_class, features=named,
                                effort=dial)  # fmt: skip
        else:
            assert policy is not None
            arm = chosen.arm
            decision = Decision(
                candidate=arm.candidate, by="policy", request_class=request_class, features=named, effort=dial,
                expected_score=round(arm.score, 4), expected_cost=round(arm.cost, 6), unit=policy.unit,
                policy=policy.version, measured_class=chosen.measured_class,
            )  # fmt: skip
        if len(candidates) > 1 and route.explore > 0 and self._rng() < route.explore:
            others = [c for c in candidates if c != decision.candidate]
            decision.candidate = others[int(self._rng() * len(others)) % len(others)]
            decision.by = "explore"
            decision.expected_score = decision.expected_cost = decision.unit = None
        return decision


def _holds(
    rule: Rule, request: ChatRequest, key: str | None, header: str | None, features: Features, request_class: str
) -> bool:
    if rule.key is not None and rule.key != key:
        return False
    if rule.header is not None and rule.header != header:
        return False
    if rule.tools is not None and rule.tools != features.tools:
        return False
    if rule.min_chars is not None and features.chars < rule.min_chars:
        return False
    if rule.max_chars is not None and features.chars > rule.max_chars:
        return False
    if rule.request_class is not None and rule.request_class != request_class:
        return False
    return not rule.metadata or _metadata_matches(rule.metadata, request.options.get("metadata"))


def _metadata_matches(wanted: Mapping[str, str], raw: Any) -> bool:
    if raw is None:
        return False
    try:
        given = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw | bytes) else raw
    except msgspec.DecodeError:
        return False
    return isinstance(given, dict) and all(given.get(k) == v for k, v in wanted.items())
