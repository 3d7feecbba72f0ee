"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The statistics of an eval: bootstrap confidence intervals, percentiles, and paired comparisons.

Percentile bootstrap with a fixed seed, so the same results always give the same intervals; the paired tests
compare two models on the items both answered: a paired bootstrap of the mean difference, and the exact
two-sided sign test on wins and losses (ties dropped), computed with `math.comb`. No SciPy: these are a few lines.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

RESAMPLES = 2000
SEED = 0


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, seed: int = SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean (NaNs when there are no values)."""
    if not values:
        return math.nan, math.nan
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(RESAMPLES))
    tail = (1 - level) / 2
    return means[int(tail * (RESAMPLES - 1))], means[math.ceil((1 - tail) * (RESAMPLES - 1))]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 to 100), interpolating linearly between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def sign_test(wins: int, losses: int) -> float:
    """The exact two-sided sign-test p-value of `wins` against `losses` (1.0 when there are none)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return float(min(1.0, 2 * tail))


@dataclass(frozen=True, slots=True)
class Paired:
    """One model against the baseline on the items both have a score for."""

    items: int
    wins: int
    ties: int
    losses: int
    mean_difference: float  # this model's mean minus the baseline's
    ci: tuple[float, float]  # of the mean difference (paired bootstrap)
    p_sign: float  # the sign test's p-value


def paired(scores: Sequence[float], baseline: Sequence[float], *, seed: int = SEED) -> Paired:
    """Compare `scores` with `baseline`, item by item (the sequences are aligned)."""
    differences = [a - b for a, b in zip(scores, baseline, strict=True)]
    wins = sum(1 for d in differences if d > 0)
    losses = sum(1 for d in differences if d < 0)
    return Paired(
        items=len(differences),
        wins=wins,
        ties=len(differences) - wins - losses,
        losses=losses,
        mean_difference=mean(differences),
        ci=bootstrap_ci(differences, seed=seed),
        p_sign=sign_test(wins, losses),
    )
