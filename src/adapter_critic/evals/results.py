"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

An eval's results: `results.jsonl` (one line per item and model, written as each finishes, so an interrupted run
keeps what it did) and `summary.json` (the per-model statistics and the paired comparisons).

A request that failed scores 0 in the statistics (a failed answer is a wrong one) and is counted under errors;
`--resume` keeps every earlier line without an error and runs the rest again. A later line for the same item
and model replaces an earlier one.

Cost, when the endpoint reports it (an adapter_critic server with prices: docs/guides/cost.md), is summed per model
over every item it was asked, with the cost per item and per correct answer (the total over the sum of scores: with
scores of 0 or 1, the number of right answers). An item whose cost is unknown (a stage without a price, a failed
request) makes the total unknown; `total_known` keeps the sum of the rest, a lower bound.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec

from .stats import RESAMPLES, SEED, bootstrap_ci, mean, paired, percentile

RESULTS = "results.jsonl"
SUMMARY = "summary.json"

Key = tuple[str, str]  # (item id, model)


class Result(msgspec.Struct, kw_only=True):
    """One item answered (or not) by one model."""

    id: str
    model: str
    scorer: str
    score: float | None = None  # None when the request or its scoring failed
    answer: str | None = None
    error: str | None = None
    note: str | None = None  # why the score is what it is (a schema error, the judge's reasoning)
    latency_ms: float | None = None
    run_id: str | None = None  # the response's `id`
    degraded: bool = False
    cached_from: str | None = None  # answered from the cache: the run that made the answer (its usage and cost)
    usage: dict[str, dict[str, Any]] = {}  # per stage, as the `adapter_critic` extension reports it
    total_usage: dict[str, Any] = {}
    calls: int | None = None  # upstream calls the run made (None: the endpoint did not say)
    cost: dict[str, Any] | None = None  # as the `adapter_critic` extension reports it (None: not reported)
    metadata: dict[str, Any] = {}

    @property
    def key(self) -> Key:
        return (self.id, self.model)

    @property
    def value(self) -> float:
        """The score the statistics use: a failure is 0."""
        return self.score if self.score is not None and self.error is None else 0.0


_decoder = msgspec.json.Decoder(Result)
_encoder = msgspec.json.Encoder()


class ResultsFile:
    """`results.jsonl` in `directory`: continued with `resume`, else started afresh."""

    def __init__(self, directory: Path, *, resume: bool) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / RESULTS
        self.results: dict[Key, Result] = {}
        self.unreadable = 0
        if resume and self.path.exists():
            self._read()
        elif self.path.exists():
            self.path.write_bytes(b"")
        self._file = self.path.open("ab")
        if self._file.tell() and not self.path.read_bytes().endswith(b"\n"):  # a line cut short by a hard kill
            self._file.write(b"\n")

    def _read(self) -> None:
        for line in self.path.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                result = _decoder.decode(line)
            except msgspec.DecodeError:
                self.unreadable += 1
                continue
            self.results[result.key] = result

    def done(self) -> set[Key]:
        """What `--resume` skips: the pairs already answered and scored without an error."""
        return {key for key, result in self.results.items() if result.error is None}

    def write(self, result: Result) -> None:
        self._file.write(_encoder.encode(result) + b"\n")
        self._file.flush()
        self.results[result.key] = result

    def close(self) -> None:
        self._file.close()


def summarize(results: dict[Key, Result], item_ids: list[str], models: list[str]) -> dict[str, Any]:
    """The statistics of `results` over these items and models (items are in dataset order)."""
    per_model: dict[str, Any] = {}
    for model in models:
        answered = [results[(item, model)] for item in item_ids if (item, model) in results]
        scores = [result.value for result in answered]
        ok = [result for result in answered if result.error is None]
        latencies = [result.latency_ms for result in ok if result.latency_ms is not None]
        calls = [result.calls for result in ok if result.calls is not None]
        stages: dict[str, list[int]] = {}
        for result in ok:
            for stage, usage in result.usage.items():
                stages.setdefault(stage, []).append(int(usage.get("total_tokens") or 0))
        per_model[model] = {
            "items": len(answered),
            "errors": len(answered) - len(ok),
            "degraded": sum(1 for result in ok if result.degraded),
            "cache_hits": sum(1 for result in ok if result.cached_from is not None),
            "mean_score": mean(scores),
            "ci95": list(bootstrap_ci(scores)),
            "tokens_per_item": {stage: mean(values) for stage, values in stages.items()},
            "calls_per_item": mean(calls) if calls else None,
            "total_tokens_per_item": mean([int(result.total_usage.get("total_tokens") or 0) for result in ok]),
            "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
            "cost": cost_summary(answered),
        }
    comparisons: dict[str, Any] = {}
    baseline = models[0]
    for model in models[1:]:
        both = [item for item in item_ids if (item, model) in results and (item, baseline) in results]
        comparison = paired([results[(i, model)].value for i in both], [results[(i, baseline)].value for i in both])
        comparisons[model] = {"baseline": baseline, **asdict(comparison), "ci": list(comparison.ci)}
    return {
        "items": len(item_ids),
        "models": models,
        "bootstrap": {"resamples": RESAMPLES, "seed": SEED, "level": 0.95},
        "per_model": per_model,
        "paired": comparisons,
    }


def cost_summary(answered: list[Result]) -> dict[str, Any] | None:
    """What a model's answers cost (see the module's docstring); None when none of them reported a cost."""
    currency = next((r.cost.get("currency") for r in answered if r.cost is not None), None)
    if not isinstance(currency, str):
        return None
    known = 0.0
    unknown = 0
    for result in answered:
        cost = result.cost or {}
        total, part = cost.get("total"), cost.get("total_known")
        if cost.get("currency") != currency or result.error is not None or not _amount(total):
            unknown += 1
        if cost.get("currency") == currency and part is not None and _amount(part):
            known += part
    correct = sum(result.value for result in answered)
    total = None if unknown else known
    return {
        "currency": currency,
        "total": total,
        "total_known": known,
        "unknown_items": unknown,
        "per_item": None if total is None or not answered else total / len(answered),
        "per_correct": None if total is None or not correct else total / correct,
        "correct": correct,
    }


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def write_summary(directory: Path, summary: dict[str, Any]) -> Path:
    path = directory / SUMMARY
    path.write_text(json.dumps(finite(summary), indent=2) + "\n", encoding="utf-8")
    return path


def finite(value: Any) -> Any:
    """NaN (a statistic of nothing) as JSON null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: finite(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [finite(inner) for inner in value]
    return value
