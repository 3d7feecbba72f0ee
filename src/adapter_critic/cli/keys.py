"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic keys usage NAME`: what a named key (`[[auth.keys]]`) started today and this month (UTC), read
from the run store, which records each run's key name (never the key)."""

from __future__ import annotations

import sys
import time

import anyio
import click
import msgspec

from ..limits.usage import key_usage
from .console import stdout
from .store import reading, store_options


@click.group()
def keys() -> None:
    """Named inbound keys: their usage."""


@keys.command("usage")
@click.argument("name")
@store_options
@click.option("--json", "as_json", is_flag=True, help="as GET /v1/keys/{name}/usage answers (without its windows)")
def usage_command(name: str, store_url: str | None, config_path: str | None, as_json: bool) -> None:
    """The runs NAME started today and this month (UTC), and their tokens."""

    async def run() -> None:
        async with reading(store_url, config_path) as store:
            found = await key_usage(name, time.time(), store, None)
        if as_json:
            sys.stdout.write(msgspec.json.encode(found).decode() + "\n")
            return
        console = stdout()
        for label, period in (("today", found.today), ("this month", found.month)):
            cost = "" if period.cost is None else f", cost {period.cost:g}"
            console.print(f"{name} {label}: {period.requests} requests, {period.tokens} tokens{cost}")

    anyio.run(run)
