"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic shadow report MODEL`: what a served model's shadow evaluations found (docs/guides/routing.md#shadow-
evaluation) — per candidate, the judged comparisons' wins, ties and losses, the candidate's win rate (a tie half a
win) with its bootstrap interval and the sign test of wins against losses, and what the candidate takes beside the
live answer per request: extra tokens, extra cost and extra time; the judge's tokens; the failures.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
import click
import msgspec
from rich.table import Table

from ..evals.shadows import summary
from .console import stdout
from .errors import CliError
from .store import reading, store_options

if TYPE_CHECKING:
    from ..store.records import ShadowRow


@click.group("shadow")
def shadow() -> None:
    """Shadow evaluations on live traffic: report what they found."""


@shadow.command("report")
@click.argument("model")
@click.option("--since-hours", type=click.FloatRange(min=0, min_open=True), help="only the evaluations this recent")
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
@store_options
def report(
    model: str, since_hours: float | None, as_json: bool, store_url: str | None, config_path: str | None
) -> None:
    """Report MODEL's shadow evaluations: per candidate, win / tie / loss, its win rate and what it adds per request."""
    since = None if since_hours is None else time.time() - since_hours * 3600

    async def main() -> list[ShadowRow]:
        async with reading(store_url, config_path) as store:
            from ..store.routing import shadow_rows

            return await shadow_rows(store.database.engine, served_model=model, since=since)

    rows = anyio.run(main)
    if not rows:
        raise CliError(f"no shadow evaluations of {model!r} recorded: give it a `shadow = {{ candidate, judge }}`")
    found = summary(rows)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(found)).decode())
        return
    table = Table("candidate", "judged", "won", "tied", "lost", "win rate", "95% CI", "p", "+tokens", "+cost", "+ms",
                  "judge tokens", "failed")  # fmt: skip
    for entry in found:
        low, high = entry["win_rate_ci"]
        table.add_row(
            entry["candidate"], str(entry["evaluated"]), str(entry["won"]), str(entry["tied"]), str(entry["lost"]),
            _said(entry["win_rate"]), f"[{_said(low)}, {_said(high)}]", f"{entry['sign_test_p']:.3g}",
            _said(entry["extra_tokens"]), _said(entry["extra_cost"]), _said(entry["extra_ms"]),
            _said(entry["judge_tokens"]), str(entry["failed"]),
        )  # fmt: skip
    stdout().print(f"shadow evaluations of {model}: {len(rows)}")
    stdout().print(table)
    for entry in found:
        for error in entry["errors"]:
            stdout().print(f"{entry['candidate']} failed: {error}")


def _said(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
