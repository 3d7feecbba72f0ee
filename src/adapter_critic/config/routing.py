"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Choosing per request (docs/guides/routing.md): an `auto` served model's candidates, the rules the operator writes,
the request classes and the cost dial (`Route`); and a served model's shadow candidate (`Shadow`)."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

Name = Annotated[str, msgspec.Meta(min_length=1)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
FEATURES = ("numbers", "code", "choices", "tools", "other_language")


class Rule(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A rule of an `auto` model: when every condition given holds, the request goes to `use`. The first rule that
    holds decides; a rule with no condition always holds."""

    use: Name
    """The candidate the request goes to (one of `candidates`)."""
    key: str | None = None
    """The caller's named key (`[[auth.keys]] name`)."""
    header: str | None = None
    """The value of the request's `x-adapter-critic-route` header."""
    metadata: dict[str, str] = {}
    """Entries the request's `metadata` object must have, each equal to its value."""
    tools: bool | None = None
    """Whether the request offers tools."""
    min_chars: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The last user message's length is at least this (characters)."""
    max_chars: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The last user message's length is at most this (characters)."""
    request_class: str | None = msgspec.field(default=None, name="class")
    """The request's class (see `classes`)."""


class RequestClass(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A class of requests the operator names: the first whose conditions all hold is a request's class (else its
    class is made from its features: `numbers-short`, `code-long`, `text-medium`…)."""

    name: Name
    """The class's name: what `route show`, the policy and the run's route note call it."""
    pattern: str | None = None
    """A regular expression searched in the last user message (Python syntax; `(?i)` for any case)."""
    features: list[str] = []
    """Features the request must have: `numbers`, `code`, `choices`, `tools`, `other_language`."""
    min_chars: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The last user message's length is at least this (characters)."""
    max_chars: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The last user message's length is at most this (characters)."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown feature {unknown[0]!r}; features are {', '.join(FEATURES)}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regular expression: {exc}") from None


class Route(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """An `auto` served model (`mode = "auto"`): per request, one of `candidates` answers — by the first rule that
    holds, else by the policy `adapter-critic route fit` learnt from measurements (the best measured score for its
    cost in the request's class, weighed by `effort`), with a share `explore` of requests sent elsewhere to keep
    measuring. With no policy and no rule, the first candidate answers."""

    candidates: Annotated[list[Name], msgspec.Meta(min_length=1)]
    """Served models, prefixed names (`self_consistency-<model>`) or chains (`critic&adapter-<model>`)."""
    rules: list[Rule] = []
    """Rules the operator writes (`[[served_models.<id>.rules]]`), tried in order: the first that holds chooses the
    candidate, before any policy."""
    classes: list[RequestClass] = []
    """Classes of requests the operator names, tried in order (else a request's class is made from its features):
    what rules, the policy and `route show` tell requests apart by."""
    effort: Share = 0.5
    """The cost dial, from 0 to 1: 1 chooses the best score whatever it costs, 0 weighs cost most. A request may
    choose its own (`x_adapter_critic.effort`)."""
    explore: Share = 0.05
    """The share of requests without a rule sent to another candidate than the policy's, to keep measuring."""
    refresh_seconds: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    """How often the server looks for a newer policy in the run store (0: on every request)."""

    def __post_init__(self) -> None:
        for index, rule in enumerate(self.rules):
            if rule.use not in self.candidates:
                raise ValueError(f"rules[{index}].use: {rule.use!r} is not one of the candidates")
        if len(set(self.candidates)) != len(self.candidates):
            raise ValueError("candidates: a candidate is listed twice")


class Shadow(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A shadow candidate (docs/guides/routing.md#shadow-evaluation): for a share of live requests, after the live
    answer is complete, `candidate` answers the same request in the background and `judge` compares the two answers
    (both orders). Never seen by the client; its cost is the operator's (`budget_*`), never the caller's key's."""

    candidate: Name
    """A served model, a prefixed name or a chain."""
    judge: Name
    """The served model (or prefixed name) that compares the answers."""
    share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.1
    """The share of live requests shadowed (sampled at random)."""
    budget_tokens: Annotated[int, msgspec.Meta(gt=0)] | None = None
    """The most tokens shadows (candidate and judge) spend per `budget_window_seconds`, in this process."""
    budget_cost: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The most they cost per window (in the prices' currency; needs `[prices]` for the models they call)."""
    budget_window_seconds: Annotated[float, msgspec.Meta(gt=0)] = 86400.0
    """The window `budget_tokens` and `budget_cost` count over (seconds; a day by default); a sampled request once
    the window's budget is spent is not shadowed (`over_budget`)."""
    concurrency: Annotated[int, msgspec.Meta(ge=1)] = 2
    """The most shadows running at once in this process; a sampled request beyond it is not shadowed (dropped)."""
