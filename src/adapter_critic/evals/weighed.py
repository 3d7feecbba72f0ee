"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`eval --effort E`: each model's score for its cost, as an `auto` model's router weighs them (docs/guides/routing.md):
its cost per item (in the prices' currency when every model's is known, else in tokens), its score per 1,000 of that
unit, and its score weighed at effort E against the dearest model's cost (`routing.policy.weighed`)."""

from __future__ import annotations

import math
from typing import Any

from ..routing.policy import weighed


def score_for_cost(summary: dict[str, Any], effort: float) -> dict[str, Any]:
    """The figures of every model in `summary` (`evals.results.summarize`'s) at `effort`."""
    per_model = summary["per_model"]
    costs = [stats.get("cost") for stats in per_model.values()]
    priced = all(cost is not None and not cost["unknown_items"] for cost in costs) and bool(costs)
    unit = str(costs[0]["currency"]) if priced else "tokens"

    def cost_of(stats: dict[str, Any]) -> float:
        if priced:
            return float(stats["cost"]["total_known"]) / max(1, int(stats["items"]))
        return float(stats["total_tokens_per_item"])

    cost = {model: cost_of(stats) for model, stats in per_model.items()}
    dearest = max(cost.values(), default=0.0)
    found = {}
    for model, stats in per_model.items():
        score = stats["mean_score"]
        found[model] = {
            "score": score,
            "cost_per_item": round(cost[model], 8),
            "score_per_1000": None if not cost[model] or math.isnan(score) else round(score / cost[model] * 1000, 6),
            "weighed": None if math.isnan(score) else round(weighed(score, cost[model], dearest, effort), 6),
        }
    return {"effort": effort, "unit": unit, "per_model": found}
