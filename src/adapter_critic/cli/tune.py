"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic tune DATASET --model M --output-dir DIR`: find the technique that pays for the model behind the
served model M on a dataset — every registered workflow with a small grid of its settings, and chains of two,
raced by successive halving on the training items, the front of score against cost re-checked on held-out items —
and write what was found: `pareto.json`, `report.md`, `report.html` (the plot) and `config.toml` (the front, ready to
serve). In-process against a config (or the built-in demo), the runs recorded in the run store as `eval`'s are;
Ctrl-C stops at once and `--resume` continues.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import click
import msgspec

from ..config import Config, Target
from ..evals import endpoint as endpoints
from ..evals.dataset import DatasetError, Item, load_dataset
from ..evals.endpoint import EndpointError
from ..evals.results import Result, ResultsFile
from ..evals.runner import EndpointJudge
from ..pricing import price_table
from ..tuning.candidates import candidates
from ..tuning.configout import write_config
from ..tuning.front import Measure, entries
from ..tuning.race import Outcome, Plan, Reporter, run
from ..tuning.report import write_html, write_markdown, write_pareto
from ..tuning.search import Budget
from .console import stderr, stdout
from .errors import CliError, Interrupted
from .eval import scorers_for
from .eval_report import Progress
from .options import Served, config_option, load_served, require_file, served_model
from .tune_report import front_table


@click.command("tune")
@click.argument("dataset", metavar="DATASET")
@click.option("--model", "-m", required=True, help="the served model whose API target is the model to improve")
@config_option
@click.option("--output-dir", "-o", default="tune-results", show_default=True, type=click.Path(file_okay=False))
@click.option("--techniques", "-t", help="workflows and chains to try, comma-separated (default: all, chains of two)")
@click.option("--no-chains", is_flag=True, help="without --techniques: leave out the chains of two")
@click.option("--scorer", "-s", default="exact", show_default=True, help="as eval's: exact, contains, judge:MODEL…")
@click.option("--budget-calls", type=click.IntRange(1), help="stop asking once this many upstream calls were made")
@click.option("--budget-cost", type=click.FloatRange(min=0, min_open=True), help="…or once this much was spent")
@click.option("--holdout", default=0.3, show_default=True, type=click.FloatRange(0, 0.8), help="share held out")
@click.option("--concurrency", "-j", default=4, show_default=True, type=click.IntRange(1, 256), help="requests at once")
@click.option("--seed", default=0, show_default=True, type=int, help="which items are held out")
@click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--resume", is_flag=True, help="keep the results already in --output-dir and ask only the rest")
def tune(
    dataset: str,
    model: str,
    config_path: str | None,
    output_dir: str,
    techniques: str | None,
    no_chains: bool,
    scorer: str,
    budget_calls: int | None,
    budget_cost: float | None,
    holdout: float,
    concurrency: int,
    seed: int,
    timeout: float,
    resume: bool,
) -> None:
    """Find which technique, with which settings, makes MODEL's answers better on DATASET (eval's JSONL) at a cost
    you accept: every workflow and chains of two raced on the training items, the front of score against cost
    re-checked on held-out items, and a config serving the front written to --output-dir."""
    path = require_file(dataset, "dataset")
    try:
        items = load_dataset(path)
    except DatasetError as exc:
        raise CliError(str(exc)) from None
    served = load_served(config_path)
    api = _tuned_target(served, model)
    config = _tuning_config(served.config, model)
    judge = EndpointJudge()
    scorers = scorers_for(items, scorer, judge, path)
    judges = sorted({spec.spec.partition(":")[2] for spec in scorers.values() if spec.spec.startswith("judge:")})
    try:
        chosen = candidates(_names(techniques), chains=not no_chains)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    train, held = split(items, holdout, seed)
    measure = _measure(config, api, budget_cost)
    plan = Plan(api.model, chosen, train, held, lambda item: scorers[item.scorer or scorer], concurrency)
    out = Path(output_dir)
    about = {"dataset": str(path), "model": model, "upstream_model": api.model, "endpoint": served.name,
             "scorer": scorer, "seed": seed, "train_items": len(train), "holdout_items": len(held),
             "holdout_ids": [item.id for item in held],
             "cost_unit": measure.unit}  # fmt: skip
    budget = Budget(calls=budget_calls, cost=budget_cost)

    async def main() -> tuple[Outcome, ResultsFile, str | None, bool]:
        results = ResultsFile(out, resume=resume)
        interrupted = False
        try:
            async with endpoints.in_process(config, served.in_process_app, timeout, served.name) as endpoint:
                judge.bind(endpoint)
                await endpoint.require(judges)  # a `judge:MODEL` scorer's model, checked before anything runs
                async with anyio.create_task_group() as tg:

                    async def on_interrupt(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                        nonlocal interrupted
                        with anyio.open_signal_receiver(signal.SIGINT) as signals:
                            task_status.started()
                            async for _ in signals:
                                interrupted = True
                                tg.cancel_scope.cancel()

                    await tg.start(on_interrupt)
                    outcome = await run(endpoint, plan, results, budget, measure.cost_of, RungReporter())
                    tg.cancel_scope.cancel()
        except EndpointError as exc:
            raise CliError(str(exc)) from None
        finally:
            results.close()
        if interrupted:
            raise Interrupted(f"interrupted: {len(results.results)} results kept in {results.path}; --resume continues")
        return outcome, results, endpoint.recorded_to, interrupted

    outcome, results, recorded_to, _ = anyio.run(main)
    about["spent"] = {"calls": budget.spent_calls, "cost": budget.spent_cost if measure.currency else None}
    _write(out, about, plan, outcome, results.results, measure, served.config, api)
    if recorded_to is not None:
        stdout().print(f"runs recorded to {recorded_to} (adapter-critic runs list)", soft_wrap=True)


def _names(techniques: str | None) -> list[str] | None:
    if techniques is None:
        return None
    names = [name.strip() for name in techniques.split(",") if name.strip()]
    if not names:
        raise CliError("--techniques names no workflow")
    return names


def split(items: Sequence[Item], holdout: float, seed: int) -> tuple[list[Item], list[Item]]:
    """The training and held-out items, by a seeded shuffle: `holdout` of them held out, the rest to train on in the
    shuffled order (each rung of the race takes a prefix of it: a random sample, not the dataset's first lines)."""
    order = list(items)
    random.Random(seed).shuffle(order)
    count = round(len(order) * holdout)
    held, train = order[:count], order[count:]
    if len(train) < 2:
        raise CliError(f"{len(items)} items leave {len(train)} to train on; tune needs at least 2 (lower --holdout)")
    return train, held


def _tuned_target(loaded: Served, model: str) -> Target:
    served = served_model(loaded, model, "--model ")
    if served.api is None:
        raise CliError(f"--model {model!r} takes its answer from another served model; name that one")
    return served.api


def _tuning_config(config: Config, model: str) -> Config:
    """`config` with every workflow servable over `model`'s API target by prefix (`critic-<its model>`), and a
    request's settings allowed and uncapped: tune tries what the config could serve."""
    models = msgspec.structs.replace(config.models, technique_prefixes=True, upstream=model, request_limits={})
    return msgspec.structs.replace(config, models=models, allow_overrides=True)


def _measure(config: Config, api: Target, budget_cost: float | None) -> Measure:
    table = price_table(config.prices, config.pricing)
    priced = table is not None and table.price_of(api.model) is not None
    if budget_cost is not None and not priced:
        raise CliError(f"--budget-cost needs a price for {api.model!r} in the config's [prices] (docs/guides/cost.md)")
    return Measure(config.pricing.currency if priced else None)


class RungReporter(Reporter):
    """A progress bar per rung on a terminal; off one, a line per rung."""

    def __init__(self) -> None:
        self._progress: Progress | None = None

    def rung(self, number: int, of: int, labels: Sequence[str], items: int, todo: int) -> Callable[[Result], None]:
        self.done()
        what = "held out" if number == of and of > 1 else "training"
        stderr().print(f"rung {number}/{of}: {len(labels)} candidates x {items} {what} items", soft_wrap=True)
        self._progress = Progress(stderr(), total=todo, done=0, name=f"rung {number}/{of}", lines=False)
        self._progress.__enter__()
        return self._progress.advance

    def done(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None


def _write(
    out: Path,
    about: dict[str, Any],
    plan: Plan,
    outcome: Outcome,
    results: dict[Any, Result],
    measure: Measure,
    config: Config,
    api: Target,
) -> None:
    found = entries(plan, outcome, results, measure)
    by_label = {c.label: c for c in plan.candidates}
    front = [by_label[e["label"]] for e in sorted(found, key=_best) if e["on_front"]]
    about = {**about, "out_of_budget": outcome.out_of_budget}
    paths = [
        write_pareto(out, about, found),
        write_markdown(out, about, found, measure),
        write_html(out, about, found, measure),
        write_config(out, front, config, api, f"{about['model']} on {about['dataset']}"),
    ]
    console = stdout()
    console.print(front_table(found, measure))
    if outcome.out_of_budget:
        console.print("the budget ran out: figures rest on the items measured (see `items`)", soft_wrap=True)
    console.print("written: " + "  ".join(str(p) for p in paths), soft_wrap=True)


def _best(entry: dict[str, Any]) -> float:
    figures = entry["holdout"] or entry
    score = figures["score"]
    return -(score if isinstance(score, int | float) else 0.0)
