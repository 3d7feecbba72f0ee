"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic runs list|show ID|export|feedback ID`: the recorded runs, read from the run store with the runs API's
filters (`--served-model`, `--mode`, `--status`, `--degraded`, `--since`, `--until`, `--request-id`, `--min-cost`,
`--key`). The command line reads the store itself, so it sees every key's runs."""

from __future__ import annotations

import csv
import shlex
import sys
from collections.abc import Callable
from typing import IO, Any, TypeVar

import anyio
import click
import msgspec
from click.core import ParameterSource

from ..store.records import STATUSES, BadCursor, RunCost, RunQuery, RunSummary, parse_time
from .console import stdout
from .errors import CliError
from .feedback import MIN_SCORE, dataset_note, feedback_command, write_dataset
from .run_views import runs_table, show
from .store import every_run, reading, store_options

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
    "cost_currency",
    "cost_total",
    "cost_known",
    "cost_unknown_stages",
    "key_name",
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
                "--cache-hits/--no-cache-hits",
                "cache_hit",
                default=None,
                help="only the runs answered from the cache (or only the others)",
            ),
            click.option(
                "--since", metavar="TIME", help="started at or after: ISO 8601 (UTC unless it says) or Unix s"
            ),
            click.option("--until", metavar="TIME", help="started before: ISO 8601 or Unix seconds"),
            click.option("--request-id", help="only the run answering this x-request-id"),
            click.option("--key", "key_name", metavar="NAME", help="only the runs this named key ([[auth.keys]]) made"),
            click.option(
                "--feedback/--no-feedback", "has_feedback", default=None, help="only runs with feedback (or without)"
            ),
            click.option(
                "--min-cost",
                type=click.FloatRange(min=0),
                metavar="AMOUNT",
                help="only runs that cost at least this (their known part, in the prices' currency)",
            ),
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
        cache_hit=options.get("cache_hit"),
        request_id=options.get("request_id"),
        min_cost=options.get("min_cost"),
        key_name=options.get("key_name"),
        has_feedback=options.get("has_feedback"),
        since=times["since"],
        until=times["until"],
    )


@click.group()
def runs() -> None:
    """The recorded runs: list, show one, export, give feedback."""


runs.add_command(feedback_command)


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


@runs.command("export")
@store_options
@filter_options
@click.option(
    "--format", "kind", type=click.Choice(["jsonl", "csv"]), help="default: from --output's suffix, else jsonl"
)
@click.option("--output", "-o", default="-", show_default=True, help="the file to write (- is stdout)")
@click.option("--limit", type=click.IntRange(1), help="at most this many runs (newest first)")
@click.option(
    "--as-dataset",
    metavar="FILE",
    help="write an eval dataset from the runs with feedback instead (- is stdout): messages and expected answers",
)
@click.option(
    "--min-score",
    default=MIN_SCORE,
    show_default=True,
    type=click.FloatRange(-1, 1),
    help="with --as-dataset: a run without a corrected answer is kept when its mean score is at least this",
)
def export_command(
    store_url: str | None,
    config_path: str | None,
    kind: str | None,
    output: str,
    limit: int | None,
    as_dataset: str | None,
    min_score: float,
    **filters: Any,
) -> None:
    """Every matching run: JSONL (each run whole, its stages included, as `runs show --json`) or CSV (one row a run).

    With --as-dataset FILE: eval dataset lines (what `adapter-critic eval` reads) from the matching runs with
    feedback: each run's messages, and as `expected` its newest corrected answer, else its answer when its mean
    score is at least --min-score. Runs with only negative feedback and no correction are left out (it says how
    many)."""
    query = query_of(filters)
    if as_dataset is not None:
        query.has_feedback = True

        async def dataset() -> tuple[int, Any]:
            async with reading(store_url, config_path) as store:
                with _opened(as_dataset) as file:
                    return await write_dataset(store, every_run(store, query, limit), file, min_score)

        written, left_out = anyio.run(dataset)
        click.echo(dataset_note(written, left_out, as_dataset), err=True)
        return
    kind = kind or ("csv" if output.lower().endswith(".csv") else "jsonl")

    async def run() -> int:
        async with reading(store_url, config_path) as store:
            with _opened(output) as file:
                writer = csv.writer(file) if kind == "csv" else None
                if writer is not None:
                    writer.writerow(CSV_FIELDS)
                count = 0
                async for summary in every_run(store, query, limit):
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


def csv_row(run: RunSummary) -> list[Any]:
    usage, error, cost = run.usage, run.error, run.cost
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
        *(
            ("", "", "", "")
            if cost is None
            else (
                cost.currency,
                "" if cost.total is None else cost.total,
                cost.total_known,
                " ".join(cost.unknown_stages),
            )
        ),
        run.key_name or "",
    ]


def _cost_cells(cost: RunCost) -> tuple[Any, ...]:
    """`cost_currency`, `cost_total` (empty when unknown), `cost_known`, `cost_unknown_stages` (space-separated)."""
    return (cost.currency, "" if cost.total is None else cost.total, cost.total_known, " ".join(cost.unknown_stages))


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
