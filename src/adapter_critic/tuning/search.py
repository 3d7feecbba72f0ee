"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Spending the budget where it pays: successive halving on the training items, then the front re-checked on held-out
ones.

Rung by rung, every candidate still in the race answers the first `m` training items (`m` grows `ETA` times a rung,
the last rung being all of them); after a rung the best third go on. "Best" is not the highest score alone — a
cheap technique nearly as good as a dear one is what many users want — but the order of non-dominated sorting on
(score up, cost down), then score: the candidates no other beats on both go first, then those only the first
beat, and so on. The baseline always goes on, so every candidate can be compared with it item by item.

The finalists (the candidates of the last rung that ran) give the front on the training items; its candidates and
the baseline then answer the held-out items, and the front is drawn again there: a candidate on it earned its
place on items the choice never saw. A budget (upstream calls, or cost where prices are configured) stops new
requests once spent; what was measured stays measured and is reported with how many items it rests on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..evals.results import Key, Result
from ..evals.stats import mean
from .candidates import BASELINE, Candidate

ETA = 3  # a rung keeps one candidate in ETA, and the next gives each ETA times the items
FIRST_RUNG_ITEMS = 2  # the least a candidate is judged on


@dataclass
class Budget:
    """What the search may spend: upstream calls, or cost in the prices' currency (None: no limit)."""

    calls: int | None = None
    cost: float | None = None
    spent_calls: int = 0
    spent_cost: float = 0.0

    def spent(self) -> bool:
        return (self.calls is not None and self.spent_calls >= self.calls) or (
            self.cost is not None and self.spent_cost >= self.cost
        )

    def charge(self, result: Result) -> None:
        self.spent_calls += result.calls if result.calls is not None else 1
        total = (result.cost or {}).get("total_known") or (result.cost or {}).get("total")
        if isinstance(total, int | float):
            self.spent_cost += float(total)


def rungs(candidates: int, items: int) -> list[int]:
    """How many training items each rung gives a candidate: growing `ETA` times, the last all of them, as many rungs
    as it takes to bring `candidates` down to a handful."""
    count = max(1, math.ceil(math.log(max(candidates, 1), ETA)))
    first = max(min(FIRST_RUNG_ITEMS, items), math.ceil(items / ETA ** (count - 1)))
    # a rung before the last gives at most a third of the items: one nearly as large as the last would be paid twice
    return sorted({first * ETA**i for i in range(count) if first * ETA ** (i + 1) <= items} | {items})


@dataclass(frozen=True)
class Point:
    """A candidate's measure on some items: mean score and mean cost per item (what the front weighs)."""

    label: str
    score: float
    cost: float


def layers(points: Sequence[Point]) -> list[list[Point]]:
    """Non-dominated sorting: the front first (no point has a score at least as high and a cost at least as low,
    one of them strictly), then the front of the rest, and so on."""
    left = list(points)
    found: list[list[Point]] = []
    while left:
        front = [p for p in left if not any(_dominates(q, p) for q in left if q is not p)]
        found.append(front)
        left = [p for p in left if p not in front]
    return found


def _dominates(a: Point, b: Point) -> bool:
    return a.score >= b.score and a.cost <= b.cost and (a.score > b.score or a.cost < b.cost)


def ranked(points: Sequence[Point]) -> list[Point]:
    """Best first: by non-dominated layer, then score, then cost, then label (a stable order for a tie)."""
    order: list[Point] = []
    for layer in layers(points):
        order += sorted(layer, key=lambda p: (-p.score, p.cost, p.label))
    return order


@dataclass
class Race:
    """The state of a search: which candidates each rung kept, the results so far, what was spent."""

    candidates: list[Candidate]
    results: dict[Key, Result]
    cost_of: Callable[[list[Result]], float]
    reached: dict[str, int] = field(default_factory=dict)  # label -> items of the last rung it ran
    finalists: list[str] = field(default_factory=list)

    def point(self, label: str, items: Sequence[str]) -> Point:
        answered = [self.results[(item, label)] for item in items if (item, label) in self.results]
        return Point(label, mean([r.value for r in answered]) if answered else 0.0, self.cost_of(answered))

    def keep(self, labels: list[str], items: Sequence[str]) -> list[str]:
        """The candidates that go on after a rung on `items`: the best `1/ETA` (at least one besides the baseline),
        and the baseline."""
        contenders = [label for label in labels if label != BASELINE]
        quota = max(1, math.ceil(len(contenders) / ETA))
        best = [p.label for p in ranked([self.point(label, items) for label in contenders])][:quota]
        return [BASELINE, *best] if BASELINE in labels else best

    def front(self, labels: Sequence[str], items: Sequence[str]) -> list[str]:
        points = [self.point(label, items) for label in labels]
        return [p.label for p in layers(points)[0]] if points else []
