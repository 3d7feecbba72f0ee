"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `tune` reports of each candidate (`pareto.json`): one object per candidate with its `workflow`, `settings`,
`score` (mean, a failed request scoring 0), `ci` (its 95% bootstrap interval), `cost` per item (in the prices'
currency; null when the model has no price), `tokens` and `calls` per item, `latency_ms` (p50), the items it was
measured on, its paired comparison with `direct` on those items, and `on_front`: on the front drawn on the held-out
items (`holdout` holds those figures for the candidates checked there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..evals.results import Key, Result, summarize
from .candidates import BASELINE
from .race import Outcome, Plan


@dataclass(frozen=True)
class Measure:
    """How the front weighs cost: in the prices' currency when the model has a price, else in tokens."""

    currency: str | None  # None: not priced, cost is tokens

    @property
    def unit(self) -> str:
        return f"{self.currency} per item" if self.currency else "tokens per item"

    def cost_of(self, answered: list[Result]) -> float:
        if not answered:
            return 0.0
        if self.currency is None:
            return sum(float(r.total_usage.get("total_tokens") or 0) for r in answered) / len(answered)
        amounts = [(r.cost or {}).get("total_known") for r in answered]
        return sum(float(a) for a in amounts if isinstance(a, int | float)) / len(answered)


def entries(plan: Plan, outcome: Outcome, results: dict[Key, Result], measure: Measure) -> list[dict[str, Any]]:
    """Every candidate's figures, in the candidates' order."""
    labels = [c.label for c in plan.candidates]
    train_ids = [item.id for item in plan.train]
    train = summarize(results, train_ids, labels)
    holdout_ids = [item.id for item in plan.holdout]
    held = summarize(results, holdout_ids, outcome.checked) if holdout_ids and outcome.checked else None
    found = []
    for candidate in plan.candidates:
        label = candidate.label
        measured = [results[(i, label)] for i in train_ids if (i, label) in results]
        entry: dict[str, Any] = {
            "label": label,
            "workflow": candidate.workflow,
            "settings": candidate.settings,
            "model": candidate.model(plan.model),
            **_figures(train, label, measured, measure),
            "rung_items": outcome.race.reached.get(label, 0),
            "finalist": label in outcome.race.finalists,
            "on_train_front": label in outcome.train_front,
            "on_front": label in outcome.front,
            "holdout": None,
        }
        if held is not None and label in outcome.checked:
            checked = [results[(i, label)] for i in holdout_ids if (i, label) in results]
            entry["holdout"] = _figures(held, label, checked, measure)
        found.append(entry)
    return found


def _figures(summary: dict[str, Any], label: str, answered: list[Result], measure: Measure) -> dict[str, Any]:
    model = summary["per_model"][label]
    paired = summary["paired"].get(label)
    return {
        "items": model["items"],
        "errors": model["errors"],
        "score": model["mean_score"],
        "ci": model["ci95"],
        "cost": measure.cost_of(answered) if measure.currency and answered else None,
        "tokens": model["total_tokens_per_item"],
        "calls": model["calls_per_item"],
        "latency_ms": model["latency_ms"]["p50"],
        "vs_direct": None if paired is None or label == BASELINE else _paired(paired),
    }


def _paired(paired: dict[str, Any]) -> dict[str, Any]:
    keep = ("items", "wins", "ties", "losses", "mean_difference", "ci", "p_sign")
    return {key: paired[key] for key in keep}


def weighed(entry: dict[str, Any], measure: Measure, *, holdout: bool = False) -> float | None:
    """The cost the front weighs for an entry (per item, in `measure`'s unit)."""
    figures = entry["holdout"] if holdout else entry
    if figures is None:
        return None
    value = figures["cost"] if measure.currency else figures["tokens"]
    return float(value) if isinstance(value, int | float) else None
