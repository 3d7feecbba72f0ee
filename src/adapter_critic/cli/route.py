"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic route fit|show MODEL`: an `auto` model's policy (docs/guides/routing.md). `fit` learns it from the
measurements of its candidates — `tune` output directories (`--tune`), and the shadow evaluations and feedback in
the run store — and stores it as the model's next version, which running servers take within `refresh_seconds`;
`show` prints the newest, with what the model chooses per class at its effort (or `--effort`).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import click
import msgspec
from rich.table import Table

from ..config.routing import Route
from ..routing.fit import Observation, fit
from ..routing.policy import Policy, choose, decode_policy, encode_policy
from .console import stdout
from .errors import CliError
from .measurements import from_feedback, from_shadows, from_tune
from .options import load_served, served_model
from .store import reading, store_options


@click.group("route")
def route() -> None:
    """An `auto` model's policy: fit it from measurements, show it."""


def _route(config_path: str | None, model: str) -> tuple[Any, Route]:
    loaded = load_served(config_path)
    served = served_model(loaded, model)
    if served.route is None:
        raise CliError(f'{model!r} is not an auto model: give it mode = "auto" and its candidates')
    return loaded, served.route


@route.command("fit")
@click.argument("model")
@click.option("--tune", "tune_dirs", multiple=True, type=click.Path(path_type=Path), metavar="DIR",
              help="a `tune` output directory whose results count (repeatable)")  # fmt: skip
@click.option("--no-store-measurements", is_flag=True, help="leave the store's shadow outcomes and feedback out")
@store_options
def fit_command(
    model: str, tune_dirs: tuple[Path, ...], no_store_measurements: bool, store_url: str | None, config_path: str | None
) -> None:
    """Learn MODEL's policy from its candidates' measurements and store it as its next version."""
    loaded, found_route = _route(config_path, model)
    observations: list[Observation] = []
    currency: str | None = None
    for directory in tune_dirs:
        seen, priced = from_tune(directory, found_route, loaded.config)
        observations += seen
        currency = currency or priced
    candidates = found_route.candidates

    async def main() -> Policy:
        async with reading(store_url, config_path, create=True) as store:
            from ..store import routing as stored

            engine = store.database.engine
            if not no_store_measurements:
                rows = await stored.shadow_rows(engine)
                requests = await stored.requests_of(engine, [row.live_run_id for row in rows])
                observations.extend(from_shadows(rows, found_route, requests))
                observations.extend(from_feedback(await stored.scored_runs(engine, candidates), found_route))
            if not observations:
                raise CliError(
                    f"no measurements of {model!r}'s candidates: give --tune DIR (a tune run over their model), or "
                    "let shadows and feedback gather in the run store"
                )
            policy = fit(model, observations, candidates, time.time(), currency)
            version = await stored.save_policy(engine, model, policy.created_at, partial(encode_policy, policy))
            return msgspec.structs.replace(policy, version=version)

    policy = anyio.run(main)
    stdout().print(f"stored policy version {policy.version} of {model} ({_sources(policy)})")
    _print(policy, found_route, found_route.effort)


@route.command("show")
@click.argument("model")
@click.option("--effort", type=click.FloatRange(0, 1), help="show the choices at this effort (default: the model's)")
@click.option("--json", "as_json", is_flag=True, help="print the policy as JSON")
@store_options
def show_command(
    model: str, effort: float | None, as_json: bool, store_url: str | None, config_path: str | None
) -> None:
    """Print MODEL's newest policy: per class, each candidate's measured score and cost, and the choice."""
    _, found_route = _route(config_path, model)

    async def main() -> Policy | None:
        async with reading(store_url, config_path) as store:
            from ..store.routing import latest_policy

            found = await latest_policy(store.database.engine, model)
            return None if found is None else decode_policy(found)

    policy = anyio.run(main)
    if policy is None:
        raise CliError(f"{model!r} has no policy yet: `adapter-critic route fit {model}` makes one")
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(policy)).decode())
        return
    stdout().print(f"policy version {policy.version} of {model} ({_sources(policy)})")
    _print(policy, found_route, found_route.effort if effort is None else effort)


def _sources(policy: Policy) -> str:
    said = ", ".join(f"{n} from {source}" for source, n in sorted(policy.sources.items()))
    return f"{said}; cost in {policy.unit}"


def _print(policy: Policy, found_route: Route, effort: float) -> None:
    table = Table("class", "candidate", "score", f"cost ({policy.unit})", "n", f"chosen at effort {effort:g}")
    for name, arms in [*policy.classes.items(), ("(any other)", policy.overall)]:
        chosen = choose(policy, name if arms is not policy.overall else "", effort, found_route.candidates)
        for index, arm in enumerate(arms):
            mark = "★" if chosen is not None and chosen.arm.candidate == arm.candidate else ""
            table.add_row(name if index == 0 else "", arm.candidate, f"{arm.score:.3g}", f"{arm.cost:.4g}",
                          str(arm.n), mark)  # fmt: skip
    stdout().print(table)
