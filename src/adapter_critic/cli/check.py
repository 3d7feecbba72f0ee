"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic check`: validate a config and, with `--deep`, ask every upstream whether it answers.

The deep check is the server's own `GET /health?deep=1` (`http/health.DeepHealth`): one `GET {base_url}/models`
per distinct URL and credentials, every configured target reported with the result of its pair — and then more: a
target is ok only when its upstream serves the target's model, listed by that `GET /models` or, if not listed,
named in a one-token chat call that is answered (not merely when something on that port answers HTTP 200).
"""

from __future__ import annotations

from typing import Any

import anyio
import click
from rich.table import Table

from ..config import Config
from ..http.health import DeepHealth
from ..redact import masked_logs, redact_userinfo
from ..service.compose import compose
from .console import stdout
from .errors import CliError
from .options import Served, config_option, load_served


@click.command()
@config_option
@click.option(
    "--deep",
    is_flag=True,
    help="also check that every target's upstream serves its model (GET /models; a 1-token call if not listed)",
)
def check(config_path: str | None, deep: bool) -> None:
    """Validate a config; with --deep, check that every target's upstream serves its model (exit 1 if one does not)."""
    served = load_served(config_path)
    console = stdout()
    console.print(served_table(served.config, served.name))
    if not deep:
        console.print(f"config OK: {served.name}")
        return
    report = anyio.run(deep_report, served)
    console.print(health_table(report))
    failed = [where for where, result in report["targets"].items() if result["status"] != "ok"]
    if failed:
        raise CliError(f"{len(failed)} of {len(report['targets'])} targets failed the deep check: {', '.join(failed)}")
    console.print(f"config OK and every upstream serves its model: {served.name}")


def served_table(config: Config, name: str) -> Table:
    table = Table(title=f"served models ({name})", title_justify="left")
    for column in ("served model", "mode", "stage", "model", "base_url"):
        table.add_column(column)
    for served_id, model in config.served_models.items():
        if model.route is not None:
            for index, candidate in enumerate(model.route.candidates):
                table.add_row(served_id if not index else "", "auto" if not index else "", "candidate",
                              f"served model {candidate}", "(in-process)")  # fmt: skip
            continue
        for index, (stage, target) in enumerate(model.stage_targets()):
            first = index == 0  # the served model's name and mode on its first row only
            row = (served_id if first else "", model.mode if first else "", stage)
            if isinstance(target, str):
                table.add_row(*row, f"served model {target}", "(in-process)")
            else:
                table.add_row(*row, target.model, redact_userinfo(target.url))
    return table


async def deep_report(served: Served) -> dict[str, Any]:
    """`/health?deep=1`'s report for this config, without starting a server."""
    service = compose(served.config, in_process_app=served.in_process_app)
    with masked_logs(service.secrets):
        service.upstream.open()
        try:
            return await DeepHealth(served.config, service.upstream, confirm_models=True).report()
        finally:
            await service.upstream.aclose()


def health_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"upstreams ({report['upstreams_checked']} checked)", title_justify="left")
    for column in ("target", "model", "base_url", "status", "detail"):
        table.add_column(column)
    table.add_column("ms", justify="right")
    for where, result in report["targets"].items():
        status = "[green]ok[/]" if result["status"] == "ok" else "[red]error[/]"
        row = (where, result["model"], result["base_url"], status)
        table.add_row(*row, detail(result), f"{result['latency_ms']:.0f}")
    return table


def detail(result: dict[str, Any]) -> str:
    """How the deep check decided: the error, or the probe's status and whether the model was listed or called."""
    if "error" in result:
        return str(result["error"])
    said = f"HTTP {result['http_status']}"
    if result.get("listed"):
        return f"{said}, listed by /models"
    return f"{said}; not listed by /models, a 1-token call answered" if result.get("called") == "answered" else said
