"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

An `auto` model's policy (docs/guides/routing.md): per request class, what each candidate was measured to score and
cost (`Arm`), as `adapter-critic route fit` found it; and the choice it makes under a cost dial (`choose`).

The choice: the candidate with the best `score - (1 - effort) * cost / dearest`, where `dearest` is the cost of the
class's dearest candidate — at effort 1 the best score (the cheaper of equals), at 0 a candidate must gain a full
point of score to be worth the dearest's cost. A class the policy has not measured uses every class's measurements
together (`overall`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class Arm(msgspec.Struct, kw_only=True, frozen=True):
    """One candidate in one class, as measured."""

    candidate: str
    score: float  # mean, from 0 to 1
    cost: float  # mean per request, in the policy's unit
    n: int  # measurements


class Policy(msgspec.Struct, kw_only=True, frozen=True):
    """What `route fit` found for one `auto` model."""

    served_model: str
    version: int
    created_at: float  # Unix seconds
    unit: str  # what `cost` counts: a currency (`USD`) when every measurement had a price, else `tokens`
    classes: dict[str, list[Arm]]
    overall: list[Arm]
    sources: dict[str, int] = {}  # measurements by where they came from: `tune`, `shadow`, `feedback`


class Choice(msgspec.Struct, frozen=True):
    arm: Arm
    measured_class: str | None  # the class whose measurements chose it (None: every class's)


def weighed(score: float, cost: float, dearest: float, effort: float) -> float:
    """A score for its cost at `effort`: `score - (1 - effort) * cost / dearest` (the cost unweighed when `dearest`
    is 0)."""
    return score - (1.0 - effort) * cost / (dearest or 1.0)


def choose(policy: Policy, request_class: str, effort: float, candidates: Sequence[str]) -> Choice | None:
    """The arm the policy chooses for `request_class` among `candidates` at `effort`; None when it measured none."""
    arms = policy.classes.get(request_class)
    measured: str | None = request_class
    if not arms:
        arms, measured = policy.overall, None
    best: Arm | None = None
    best_value = 0.0
    dearest = max((arm.cost for arm in arms), default=0.0)
    for arm in arms:
        if arm.candidate not in candidates:
            continue
        value = weighed(arm.score, arm.cost, dearest, effort)
        if best is None or value > best_value + 1e-12 or (abs(value - best_value) <= 1e-12 and arm.cost < best.cost):
            best, best_value = arm, value
    return None if best is None else Choice(best, measured)


_decoder = msgspec.json.Decoder(Policy)


def decode_policy(text: str | bytes) -> Policy:
    return _decoder.decode(text)


def encode_policy(policy: Policy, version: int) -> str:
    """`policy` as JSON, numbered `version`."""
    return msgspec.json.encode(msgspec.structs.replace(policy, version=version)).decode()
