"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Fitting an `auto` model's policy (`adapter-critic route fit`, docs/guides/routing.md): measurements of its
candidates — `tune` results, shadow outcomes, feedback — as observations of a score (0 to 1) and a cost in a request
class, averaged per class and candidate (`Arm`) and over every class (`Policy.overall`).

Where the scores come from: a `tune` result's score as its scorer gave it; a shadow outcome is 1 for the side the
judge preferred in both orders, 0 for the other, 0.5 each for a tie (a failed one is left out); feedback's score
(-1 to 1) mapped onto 0 to 1. Costs are in the prices' currency when every observation has one, else in tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .policy import Arm, Policy


class Observation(NamedTuple):
    candidate: str
    request_class: str
    score: float
    tokens: int
    cost: float | None  # None: not priced
    source: str  # `tune`, `shadow` or `feedback`


def fit(
    served_model: str,
    observations: Iterable[Observation],
    candidates: Sequence[str],
    created_at: float,
    currency: str | None = None,
) -> Policy:
    """The policy the observations of `candidates` say (others are left out); costs in `currency` when every
    observation is priced, else in tokens."""
    kept = [o for o in observations if o.candidate in candidates]
    priced = currency is not None and bool(kept) and all(o.cost is not None for o in kept)
    by_class: dict[str, dict[str, list[Observation]]] = defaultdict(lambda: defaultdict(list))
    overall: dict[str, list[Observation]] = defaultdict(list)
    sources: dict[str, int] = defaultdict(int)
    for o in kept:
        by_class[o.request_class][o.candidate].append(o)
        overall[o.candidate].append(o)
        sources[o.source] += 1
    return Policy(
        served_model=served_model,
        version=0,
        created_at=created_at,
        unit=currency if priced and currency is not None else "tokens",
        classes={name: _arms(found, candidates, priced) for name, found in sorted(by_class.items())},
        overall=_arms(overall, candidates, priced),
        sources=dict(sources),
    )


def _arms(found: dict[str, list[Observation]], candidates: Sequence[str], priced: bool) -> list[Arm]:
    arms = []
    for candidate in candidates:
        seen = found.get(candidate)
        if not seen:
            continue
        costs = [float(o.cost or 0.0) if priced else float(o.tokens) for o in seen]
        arms.append(
            Arm(
                candidate=candidate,
                score=round(sum(o.score for o in seen) / len(seen), 6),
                cost=round(sum(costs) / len(costs), 8),
                n=len(seen),
            )
        )
    return arms
