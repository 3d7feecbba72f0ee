"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a served model's shadow evaluations found (docs/guides/routing.md#shadow-evaluation), per candidate: the judged
comparisons' wins, ties and losses, the candidate's win rate (a tie half a win) with its bootstrap interval and the
sign test of wins against losses, and what it takes beside the live answer per request (extra tokens, cost and time),
the judge's tokens and the failures. `adapter-critic shadow report` prints it; `GET /v1/shadows/{model}` serves it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ..store.records import ShadowRow
from .stats import bootstrap_ci, mean, sign_test

_POINTS = {"won": 1.0, "tied": 0.5, "lost": 0.0}


def summary(rows: list[ShadowRow]) -> list[dict[str, Any]]:
    """Per candidate (in the order first seen): the report's figures."""
    by_candidate: dict[str, list[ShadowRow]] = defaultdict(list)
    for row in rows:
        by_candidate[row.candidate].append(row)
    found = []
    for candidate, seen in by_candidate.items():
        judged = [row for row in seen if row.outcome in _POINTS]
        points = [_POINTS[row.outcome] for row in judged]
        wins = sum(1 for row in judged if row.outcome == "won")
        losses = sum(1 for row in judged if row.outcome == "lost")
        low, high = bootstrap_ci(points)
        priced = [row for row in judged if row.detail.live.cost is not None and row.detail.shadow.cost is not None]
        found.append({
            "candidate": candidate,
            "evaluated": len(judged),
            "failed": len(seen) - len(judged),
            "won": wins,
            "tied": len(judged) - wins - losses,
            "lost": losses,
            "win_rate": _finite(mean(points)),
            "win_rate_ci": [_finite(low), _finite(high)],
            "sign_test_p": sign_test(wins, losses),
            "extra_tokens": _finite(mean([row.detail.shadow.tokens - row.detail.live.tokens for row in judged])),
            "extra_cost": _finite(mean([(r.detail.shadow.cost or 0) - (r.detail.live.cost or 0) for r in priced])),
            "extra_ms": _finite(mean([(r.detail.shadow.ms or 0) - (r.detail.live.ms or 0) for r in judged])),
            "judge_tokens": _finite(mean([row.detail.judge.tokens for row in judged])),
            "errors": sorted({row.detail.error for row in seen if row.detail.error})[:5],
        })  # fmt: skip
    return found


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)
