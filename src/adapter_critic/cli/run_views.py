"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

How recorded runs look on a terminal: the table of `runs list`, and one run whole for `runs show` (its stages, its
request, its answer). A cost column appears when a run has a cost (the server had prices: docs/guides/cost.md), a
key column when a run was made with a named key (`[[auth.keys]]`)."""

from __future__ import annotations

import msgspec
from rich.table import Table

from ..store.records import RunDetail, RunSummary, StoredStage
from .console import stdout
from .costs import bounded, currency_of, money, run_cost


def runs_table(summaries: list[RunSummary]) -> Table:
    table = Table(title=f"{len(summaries)} runs, newest first", title_justify="left")
    priced = any(run.cost is not None for run in summaries)
    currency = currency_of([run.cost for run in summaries])
    keyed = any(run.key_name is not None for run in summaries)
    columns = ["id", "started (UTC)", *(["key"] if keyed else []), "served model", "mode", "status", "ms", "tokens"]
    if priced:
        columns.append(f"cost ({currency})" if currency else "cost")
    for column in [*columns, "error"]:
        right = column in ("ms", "tokens") or column.startswith("cost")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    for run in summaries:
        status = f"{run.status} (degraded)" if run.degraded and run.status != "degraded" else run.status
        if run.cached_from is not None:
            status += " (cache hit)"
        cells = [
            run.id,
            run.started_at.replace("T", " ").removesuffix("Z"),
            *([run.key_name or ""] if keyed else []),
            run.served_model,
            run.mode,
            status,
            f"{run.duration_ms:.0f}" if run.duration_ms is not None else "",
            str(run.usage.total_tokens) if run.usage is not None else "",
        ]
        if priced:
            cells.append(run_cost(run.cost, currency))
        table.add_row(*cells, run.error.message[:80] if run.error is not None else "")
    return table


def show(run: RunDetail) -> None:
    console = stdout()
    said = [f"run {run.id} ({run.served_model}, {run.mode}): {run.status}" + (", degraded" if run.degraded else "")]
    said.append(f"started {run.started_at}, {run.duration_ms or 0:.0f} ms, request id {run.request_id}")
    if run.key_name is not None:
        said.append(f"key: {run.key_name}")
    if run.cached_from is not None:
        said.append(f"answered from the cache: the answer of run {run.cached_from}")
    if run.usage is not None:
        said.append(f"tokens: {run.usage.prompt_tokens} in, {run.usage.completion_tokens} out")
    cost = run.cost
    if cost is not None:
        line = f"cost: {bounded(cost.total, cost.total_known, bool(cost.unknown_stages))} {cost.currency}"
        if cost.unknown_stages:
            line += f" (unknown for {', '.join(cost.unknown_stages)})"
        said.append(line)
    if run.error is not None:
        said.append(f"error: HTTP {run.error.status} {run.error.type}: {run.error.message}")
    for line in said:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(stages_table(run.stages))
    if run.request is not None and run.request.messages is not None:
        for message in run.request.messages:
            role = message.get("role", "?") if isinstance(message, dict) else "?"
            console.print(f"[bold]{role}[/]: ", end="")
            console.print(str(message.get("content") if isinstance(message, dict) else message), markup=False)
    if run.answer is not None:
        answer = (
            run.answer.content
            if run.answer.content is not None
            else msgspec.json.encode(run.answer.tool_calls).decode()
        )
        console.print(f"[bold]answer[/] ({run.answer.finish_reason}): ", end="")
        console.print(answer if run.capture == "full" else "(not captured: capture = metadata)", markup=False)


def stages_table(stages: list[StoredStage]) -> Table:
    table = Table(title="stages", title_justify="left")
    currencies = {stage.cost.currency for stage in stages if stage.cost is not None}
    currency = next(iter(currencies)) if len(currencies) == 1 else None
    columns = ["#", "stage", "status", "target", "at ms", "ms", "tokens", "attempts"]
    if currencies:
        columns.append(f"cost ({currency})" if currency else "cost")
    for column in columns:
        table.add_column(column, justify="left" if column in ("stage", "status", "target") else "right")
    for stage in stages:
        status = stage.status if stage.error is None else f"{stage.status}: {stage.error.message[:60]}"
        tokens = stage.usage.get("total_tokens", "") if stage.usage_reported else "?"
        cells = [str(stage.index), stage.stage, status, f"{stage.target_model}@{stage.target_host}"]
        cells += [f"{stage.started_offset_ms:.0f}", f"{stage.elapsed_ms:.0f}", str(tokens), str(len(stage.attempts))]
        if currencies:
            cells.append(_stage_cost(stage, currency))
        table.add_row(*cells)
    return table


def _stage_cost(stage: StoredStage, currency: str | None) -> str:
    """A stage call's cost: its amount, `?` when unknown; its currency unless the column names it."""
    cost = stage.cost
    if cost is None:
        return ""
    amount = "?" if cost.amount is None else money(cost.amount)
    return amount if currency == cost.currency else f"{amount} {cost.currency}"
