"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `eval` shows: a progress bar on a terminal (plain lines otherwise), and the tables of its summary."""

from __future__ import annotations

import math
import time
from types import TracebackType
from typing import Any

from rich import progress as bar
from rich.console import Console
from rich.table import Table

from ..evals.results import Result
from .costs import bounded


class Progress:
    """Items done, rate, ETA and errors: a Rich progress bar on a terminal, else one plain line per result."""

    def __init__(self, console: Console, *, total: int, done: int, name: str = "eval", lines: bool = True) -> None:
        """`name` heads the bar; `lines`: off a terminal, a line per result (else none: the caller says what ran)."""
        self._console = console
        self._lines = lines
        self._total = total
        self._done = done
        self._errors = 0
        self._started = time.monotonic()
        self._bar: bar.Progress | None = None
        self._task: bar.TaskID | None = None
        if console.is_terminal:
            self._bar = bar.Progress(
                bar.TextColumn(name),
                bar.BarColumn(),
                bar.MofNCompleteColumn(),
                bar.TextColumn("{task.fields[rate]}"),
                bar.TimeRemainingColumn(),
                bar.TextColumn("{task.fields[errors]}"),
                console=console,
            )
            self._task = self._bar.add_task(name, total=total, completed=done, rate="", errors="")

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        elif self._done and self._lines:
            self._console.print(f"resuming: {self._done} of {self._total} already done", soft_wrap=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def notice(self, text: str) -> None:
        self._console.print(text, soft_wrap=True)

    def advance(self, result: Result) -> None:
        self._done += 1
        self._errors += result.error is not None
        if self._bar is not None and self._task is not None:
            rate = f"{self._bar.tasks[0].speed or 0:.1f}/s"
            errors = f"[red]{self._errors} errors[/]" if self._errors else "0 errors"
            self._bar.update(self._task, advance=1, rate=rate, errors=errors)
            return
        if not self._lines:
            return
        said = f"error: {result.error}" if result.error is not None else f"score {result.score:g}"
        line = f"[{self._done}/{self._total}] {result.model} {result.id}: {said}"
        if result.latency_ms is not None:
            line += f" ({result.latency_ms:.0f} ms)"
        self._console.print(line, soft_wrap=True, markup=False, highlight=False)


def model_table(summary: dict[str, Any]) -> Table:
    """Each model's score and CI, what it cost (when the endpoint reported costs), upstream calls, tokens, latency
    and errors."""
    table = Table(title=f"eval: {summary['items']} items", title_justify="left")
    table.add_column("model")
    table.add_column("n", justify="right")
    table.add_column("score", justify="right")
    table.add_column("95% CI", justify="right")
    costs = [stats.get("cost") for stats in summary["per_model"].values()]
    currencies = {cost["currency"] for cost in costs if cost is not None}
    currency = f" ({next(iter(currencies))})" if len(currencies) == 1 else ""
    if currencies:
        table.add_column(f"cost/item{currency}", justify="right")
        table.add_column(f"cost/correct{currency}", justify="right")
    table.add_column("calls/item", justify="right")
    table.add_column("tokens/item by stage")
    table.add_column("p50 ms", justify="right")
    table.add_column("p95 ms", justify="right")
    table.add_column("degraded", justify="right")
    cached = any(stats.get("cache_hits") for stats in summary["per_model"].values())
    if cached:
        table.add_column("cached", justify="right")
    table.add_column("errors", justify="right")
    for model, stats in summary["per_model"].items():
        stages = ", ".join(f"{stage} {tokens:.0f}" for stage, tokens in stats["tokens_per_item"].items())
        total = stats["total_tokens_per_item"]
        cost_cells = _cost_cells(stats.get("cost"), stats["items"], single=len(currencies) == 1) if currencies else []
        table.add_row(
            model,
            str(stats["items"]),
            _number(stats["mean_score"]),
            f"[{_number(stats['ci95'][0])}, {_number(stats['ci95'][1])}]",
            *cost_cells,
            "-" if stats.get("calls_per_item") is None else _number(stats["calls_per_item"], 1),
            f"{stages} (= {total:.0f})" if len(stats["tokens_per_item"]) > 1 else stages or "-",
            _number(stats["latency_ms"]["p50"], 0),
            _number(stats["latency_ms"]["p95"], 0),
            str(stats["degraded"]),
            *([str(stats.get("cache_hits", 0))] if cached else []),
            str(stats["errors"]),
        )
    return table


def paired_table(summary: dict[str, Any]) -> Table:
    table = Table(title="paired, against the first model", title_justify="left")
    for column in ("model", "vs", "n", "win/tie/loss", "Δ score", "95% CI", "sign test p"):
        table.add_column(column, justify="left" if column in ("model", "vs") else "right")
    for model, comparison in summary["paired"].items():
        table.add_row(
            model,
            comparison["baseline"],
            str(comparison["items"]),
            f"{comparison['wins']}/{comparison['ties']}/{comparison['losses']}",
            _number(comparison["mean_difference"], signed=True),
            f"[{_number(comparison['ci'][0], signed=True)}, {_number(comparison['ci'][1], signed=True)}]",
            _number(comparison["p_sign"], 3),
        )
    return table


def weighed_table(found: dict[str, Any]) -> Table:
    """Each model's score for its cost (`evals.weighed`)."""
    unit, effort = found["unit"], found["effort"]
    table = Table(title=f"score for cost, at effort {effort:g}", title_justify="left")
    for column in ("model", "score", f"cost/item ({unit})", f"score per 1,000 {unit}", f"weighed at {effort:g}"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for model, figures in found["per_model"].items():
        table.add_row(
            model,
            _number(figures["score"]),
            f"{figures['cost_per_item']:.4g}",
            "-" if figures["score_per_1000"] is None else f"{figures['score_per_1000']:.3g}",
            "-" if figures["weighed"] is None else _number(figures["weighed"], 3),
        )
    return table


def _cost_cells(cost: dict[str, Any] | None, items: int, *, single: bool) -> list[str]:
    """Cost per item and per correct answer; `≥ x` where some item's cost is unknown (the known part's share), `-`
    where there is nothing to divide by, or no cost at all."""
    if cost is None:
        return ["-", "-"]
    unknown = bool(cost["unknown_items"])
    known = cost["total_known"]
    suffix = "" if single else f" {cost['currency']}"
    cells = []
    for count in (items, cost["correct"]):
        if not count:
            cells.append("-")
            continue
        exact = None if unknown else known / count
        cells.append(bounded(exact, known / count, unknown) + suffix)
    return cells


def _number(value: float, digits: int = 2, *, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
