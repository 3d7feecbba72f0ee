"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic runs list|show ID|export`: the recorded runs, read from the run store with the runs API's
filters (`--served-model`, `--mode`, `--status`, `--degraded`, `--since`, `--until`, `--request-id`)."""

from __future__ import annotations

import csv
import shlex
import sys
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, TypeVar

import anyio
import click
import msgspec
from click.core import ParameterSource
from rich.table import Table

from ..store.records import STATUSES, BadCursor, RunDetail, RunQuery, RunSummary, parse_time
from .console import stdout
from .errors import CliError
from .store import reading, store_options

_F = TypeVar("_F", bound=Callable[..., Any])

CSV_FIELDS = (
    "id",
    "request_id",
    "served_model",
    "mode",
    "stream",
    "status",
    "degraded",
    "started_at",
    "finished_at",
    "duration_ms",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "error_status",
    "error_message",
)


def filter_options(function: _F) -> _F:
    """The runs API's filters, as options."""
    for option in reversed(
        [
            click.option("--served-model", help="only runs of this served model"),
            click.option("--mode", help="only runs of this mode (direct, adapter, critic, …)"),
            click.option("--status", type=click.Choice(STATUSES), help="only runs that ended so"),
            click.option("--degraded/--not-degraded", default=None, help="only degraded (or not degraded) runs"),
            click.option(
                "--since", metavar="TIME", help="started at or after: ISO 8601 (UTC unless it says) or Unix s"
            ),
            click.option("--until", metavar="TIME", help="started before: ISO 8601 or Unix seconds"),
            click.option("--request-id", help="only the run answering this x-request-id"),
        ]
    ):
        function = option(function)
    return function


def query_of(options: dict[str, Any]) -> RunQuery:
    times: dict[str, float | None] = {}
    for name in ("since", "until"):
        text = options.get(name)
        try:
            times[name] = parse_time(text) if text else None
        except ValueError:
            raise CliError(
                f"--{name}: {text!r} is not a time (ISO 8601, e.g. 2026-11-25T08:00Z, or Unix seconds)"
            ) from None
    return RunQuery(
        served_model=options.get("served_model"),
        mode=options.get("mode"),
        status=options.get("status"),
        degraded=options.get("degraded"),
        request_id=options.get("request_id"),
        **times,
    )


@click.group()
def runs() -> None:
    """The recorded runs: list, show one, export."""


@runs.command("list")
@store_options
@filter_options
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="runs on the page")
@click.option("--cursor", help="the next page: the cursor the previous page printed")
@click.option("--json", "as_json", is_flag=True, help="the page as the runs API's JSON")
def list_command(
    store_url: str | None, config_path: str | None, limit: int, cursor: str | None, as_json: bool, **filters: Any
) -> None:
    """Recorded runs, newest first."""
    query = query_of(filters)
    context = click.get_current_context()

    async def run() -> None:
        async with reading(store_url, config_path) as store:
            try:
                page = await store.list_runs(query, limit=limit, cursor=cursor)
            except BadCursor:
                raise CliError(f"--cursor: {cursor!r} is not a cursor this store handed out") from None
        if as_json:
            sys.stdout.write(msgspec.json.encode(page).decode() + "\n")
            return
        console = stdout()
        console.print(runs_table(page.data))
        if page.next_cursor:
            more = f"more: {next_page(context, page.next_cursor)}"
            console.print(more, soft_wrap=True, markup=False, highlight=False)

    anyio.run(run)


def next_page(context: click.Context, cursor: str) -> str:
    """The command for the next page: this one with every option the user typed (filters, `--limit`, `--store`,
    `--config`), its `--cursor` the one given."""
    words = ["adapter-critic", "runs", "list"]
    for param in context.command.params:
        name = param.name
        if name in ("cursor", "as_json") or not isinstance(param, click.Option) or name is None:
            continue
        if context.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue  # a default, or the environment, which the next command reads as well
        value = context.params[name]
        if param.secondary_opts:  # --degraded/--not-degraded
            words.append(_long(param.opts if value else param.secondary_opts))
        else:
            words += [_long(param.opts), shlex.quote(str(value))]
    return " ".join([*words, "--cursor", shlex.quote(cursor)])


def _long(opts: list[str]) -> str:
    return next((opt for opt in opts if opt.startswith("--")), opts[0])


def runs_table(summaries: list[RunSummary]) -> Table:
    table = Table(title=f"{len(summaries)} runs, newest first", title_justify="left")
    for column in ("id", "started (UTC)", "served model", "mode", "status", "ms", "tokens", "error"):
        table.add_column(column, justify="right" if column in ("ms", "tokens") else "left", overflow="fold")
    for run in summaries:
        status = f"{run.status} (degraded)" if run.degraded and run.status != "degraded" else run.status
        table.add_row(
            run.id,
            run.started_at.replace("T", " ").removesuffix("Z"),
            run.served_model,
            run.mode,
            status,
            f"{run.duration_ms:.0f}" if run.duration_ms is not None else "",
            str(run.usage.total_tokens) if run.usage is not None else "",
            run.error.message[:80] if run.error is not None else "",
        )
    return table


@runs.command("show")
@click.argument("run_id", metavar="ID")
@store_options
@click.option("--json", "as_json", is_flag=True, help="the run as the runs API's JSON")
def show_command(run_id: str, store_url: str | None, config_path: str | None, as_json: bool) -> None:
    """One run: its request, every stage in order, the answer."""

    async def run() -> None:
        async with reading(store_url, config_path) as store:
            detail = await store.get_run(run_id)
        if detail is None:
            raise CliError(f"no run {run_id!r} in the run store")
        if as_json:
            sys.stdout.write(msgspec.json.encode(detail).decode() + "\n")
            return
        show(detail)

    anyio.run(run)


def show(run: RunDetail) -> None:
    console = stdout()
    said = [f"run {run.id} ({run.served_model}, {run.mode}): {run.status}" + (", degraded" if run.degraded else "")]
    said.append(f"started {run.started_at}, {run.duration_ms or 0:.0f} ms, request id {run.request_id}")
    if run.usage is not None:
        said.append(f"tokens: {run.usage.prompt_tokens} in, {run.usage.completion_tokens} out")
    if run.error is not None:
        said.append(f"error: HTTP {run.error.status} {run.error.type}: {run.error.message}")
    for line in said:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    stages = Table(title="stages", title_justify="left")
    for column in ("#", "stage", "status", "target", "at ms", "ms", "tokens", "attempts"):
        stages.add_column(column, justify="right" if column in ("#", "at ms", "ms", "tokens", "attempts") else "left")
    for stage in run.stages:
        status = stage.status if stage.error is None else f"{stage.status}: {stage.error.message[:60]}"
        tokens = stage.usage.get("total_tokens", "") if stage.usage_reported else "?"
        row = (str(stage.index), stage.stage, status, f"{stage.target_model}@{stage.target_host}")
        stages.add_row(
            *row, f"{stage.started_offset_ms:.0f}", f"{stage.elapsed_ms:.0f}", str(tokens), str(len(stage.attempts))
        )
    console.print(stages)
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


@runs.command("export")
@store_options
@filter_options
@click.option(
    "--format", "kind", type=click.Choice(["jsonl", "csv"]), help="default: from --output's suffix, else jsonl"
)
@click.option("--output", "-o", default="-", show_default=True, help="the file to write (- is stdout)")
@click.option("--limit", type=click.IntRange(1), help="at most this many runs (newest first)")
def export_command(
    store_url: str | None, config_path: str | None, kind: str | None, output: str, limit: int | None, **filters: Any
) -> None:
    """Every matching run: JSONL (each run whole, its stages included, as `runs show --json`) or CSV (one row a run)."""
    query = query_of(filters)
    kind = kind or ("csv" if output.lower().endswith(".csv") else "jsonl")

    async def run() -> int:
        async with reading(store_url, config_path) as store:
            with _opened(output) as file:
                writer = csv.writer(file) if kind == "csv" else None
                if writer is not None:
                    writer.writerow(CSV_FIELDS)
                count = 0
                async for summary in _all(store, query, limit):
                    if writer is not None:
                        writer.writerow(csv_row(summary))
                    else:
                        detail = await store.get_run(summary.id)
                        file.write(msgspec.json.encode(detail or summary).decode() + "\n")
                    count += 1
                return count

    count = anyio.run(run)
    if output != "-":
        click.echo(f"{count} runs written to {output}", err=True)


async def _all(store: Any, query: RunQuery, limit: int | None) -> AsyncIterator[RunSummary]:
    cursor: str | None = None
    given = 0
    while True:
        page = await store.list_runs(query, limit=1000, cursor=cursor)
        for summary in page.data:
            if limit is not None and given >= limit:
                return
            given += 1
            yield summary
        if not page.next_cursor:
            return
        cursor = page.next_cursor


def csv_row(run: RunSummary) -> list[Any]:
    usage = run.usage
    error = run.error
    return [
        run.id,
        run.request_id,
        run.served_model,
        run.mode,
        run.stream,
        run.status,
        run.degraded,
        run.started_at,
        run.finished_at or "",
        "" if run.duration_ms is None else run.duration_ms,
        *(("", "", "") if usage is None else (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)),
        *(("", "") if error is None else (error.status, error.message)),
    ]


class _opened:
    """`output` opened for writing text (stdout for `-`, left open)."""

    def __init__(self, output: str) -> None:
        self._output = output
        self._file: IO[str] | None = None

    def __enter__(self) -> IO[str]:
        if self._output == "-":
            return sys.stdout
        try:
            self._file = open(self._output, "w", encoding="utf-8", newline="")
        except OSError as exc:
            raise CliError(f"{self._output}: cannot write ({exc.strerror or exc})") from None
        return self._file

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
