"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic lessons learn|list|show|activate|rollback MODEL`: the lessons a served model's reviewers learn from
the feedback on its runs (docs/guides/learning.md). `learn` and `activate` run in process against the config (or the
built-in demo), in the run store it records to; a new version becomes active only when the check on held-out items
says it is not worse (`activate --force` overrides that; `rollback` gives the version active before back).
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.table import Table

from ..evals import endpoint as endpoints
from ..evals.dataset import DatasetError, Item, load_dataset, parse_item
from ..evals.endpoint import EndpointError, InProcess
from ..evals.runner import EndpointJudge
from ..learning.distill import digest, learner_messages, read_lessons
from ..learning.gate import answers, verdict
from ..store.records import RunDetail, RunQuery
from .console import stdout
from .errors import CliError
from .eval import scorers_for
from .feedback import MIN_SCORE, dataset_line
from .options import Served, config_option, load_served, served_model
from .store import every_run

_T = TypeVar("_T")
TIMEOUT = 300.0


@click.group("lessons")
def lessons() -> None:
    """What a served model's reviewers learnt from feedback: learn a new version, list, show, activate, roll back."""


def _learning(loaded: Served, model: str) -> Any:
    served = served_model(loaded, model)
    if served.learning is None:
        raise CliError(f'{model!r} does not learn: give it a `learning = {{ learner = "<served model>" }}` table')
    return served.learning


def _in_process(config_path: str | None, model: str, work: Callable[[InProcess, Any], Awaitable[_T]]) -> _T:
    served = load_served(config_path)
    learning = _learning(served, model)

    async def main() -> _T:
        try:
            async with endpoints.in_process(served.config, served.in_process_app, TIMEOUT, served.name) as endpoint:
                assert isinstance(endpoint, InProcess)
                if endpoint.service.store is None:
                    raise CliError("lessons are kept in the run store, which is off: set ADAPTER_CRITIC_STORE")
                return await work(endpoint, learning)
        except EndpointError as exc:
            raise CliError(str(exc)) from None

    return anyio.run(main)


async def _feedback_runs(endpoint: InProcess, model: str) -> list[RunDetail]:
    store = endpoint.service.store
    assert store is not None
    found: list[RunDetail] = []
    async for summary in every_run(store, RunQuery(served_model=model, has_feedback=True)):
        run = await store.get_run(summary.id)
        if run is not None:
            found.append(run)
    return found


def _holdout(learning: Any, runs: list[RunDetail], seed: int) -> tuple[list[RunDetail], list[Item]]:
    """The runs to learn from, and the items to check on: a third of the runs with feedback held out (their
    dataset lines, as `runs export --as-dataset` writes them), or the dataset `holdout` names."""
    if learning.holdout != "feedback":
        try:
            return runs, load_dataset(Path(learning.holdout))
        except DatasetError as exc:
            raise CliError(f"learning.holdout: {exc}") from None
    if len(runs) < 2:
        raise CliError(f"{len(runs)} run(s) with feedback: learning needs 2 or more (one third is held out to check)")
    order = list(runs)
    random.Random(seed).shuffle(order)
    cut = max(1, len(order) // 3)
    held, learn = order[:cut], order[cut:]
    lines = [line for run in held if (line := dataset_line(run, MIN_SCORE)[0]) is not None]
    return learn, [parse_item(json.dumps(line), number, "feedback") for number, line in enumerate(lines, 1)]


async def _check(endpoint: InProcess, model: str, learning: Any, items: list[Item], versions: tuple[int | None, int],
                 concurrency: int) -> dict[str, Any]:  # fmt: skip
    judge = EndpointJudge()
    judge.bind(endpoint)
    scorers = scorers_for(items, learning.scorer, judge, Path("holdout"))
    scorer_of = lambda item: scorers[item.scorer or learning.scorer]  # noqa: E731
    before = await answers(endpoint, model, versions[0], items, scorer_of, concurrency)
    after = await answers(endpoint, model, versions[1], items, scorer_of, concurrency)
    return verdict(before, after, versions)


def _said(check: dict[str, Any]) -> str:
    def score(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}"

    return (
        f"on {check['items']} held-out items: {score(check['score_before'])} -> {score(check['score_after'])} "
        f"(wins {check['wins']}, ties {check['ties']}, losses {check['losses']}, p={check['p_sign']:.2g})"
    )


@lessons.command("learn")
@click.argument("model")
@config_option
@click.option("--seed", default=0, show_default=True, type=int, help="which runs with feedback are held out")
@click.option("--concurrency", "-j", default=4, show_default=True, type=click.IntRange(1, 64))
def learn(model: str, config_path: str | None, seed: int, concurrency: int) -> None:
    """Distil the feedback on MODEL's runs into a new version of its lessons, check it on held-out items, and make
    it active when it is not worse (else it is kept as `rejected`)."""
    from ..store import lessons as kept

    async def work(endpoint: InProcess, learning: Any) -> None:
        store = endpoint.service.store
        assert store is not None
        engine = store.database.engine
        learn_from, items = _holdout(learning, await _feedback_runs(endpoint, model), seed)
        shown = digest(learn_from)
        if not shown:
            raise CliError(f"no feedback to learn from on {model!r}'s runs (give some: adapter-critic runs feedback)")
        current = await kept.active(engine, model)
        messages = learner_messages(shown, current.lessons if current else [], learning.max_lessons)
        reply = await endpoint.chat({"model": learning.learner, "messages": messages, "temperature": 0})
        found = kept.bounded(read_lessons(reply.text), learning.max_lessons)
        if not found:
            raise CliError(f"the learner {learning.learner!r} wrote no lessons (one per line, starting with '- ')")
        version = await kept.add(engine, model, found, current.version if current else None)
        if not items:
            await kept.settle(engine, model, version.version, "candidate", {"not_worse": False, "items": 0})
            stdout().print(f"version {version.version} kept as a candidate: no held-out items to check it on")
            return
        check = await _check(endpoint, model, learning, items, (version.parent, version.version), concurrency)
        status: kept.Status = "active" if check["not_worse"] else "rejected"
        await kept.settle(engine, model, version.version, status, check)
        await store.flush()
        console = stdout()
        console.print(_lessons_table(model, version.version, found))
        outcome = "active" if status == "active" else "rejected: worse than the lessons in use"
        console.print(f"version {version.version} {outcome}, {_said(check)}", soft_wrap=True)

    _in_process(config_path, model, work)


def _lessons_table(model: str, number: int, found: list[str]) -> Table:
    table = Table(title=f"{model}: lessons, version {number}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("lesson")
    for index, lesson in enumerate(found, 1):
        table.add_row(str(index), lesson)
    return table


@lessons.command("list")
@click.argument("model")
@config_option
def list_versions(model: str, config_path: str | None) -> None:
    """Every version of MODEL's lessons, the newest first, with its status and what its check found."""
    from ..store import lessons as kept

    async def work(endpoint: InProcess, learning: Any) -> None:
        assert endpoint.service.store is not None
        found = await kept.versions(endpoint.service.store.database.engine, model)
        table = Table(title=f"{model}: lessons", title_justify="left")
        for column in ("version", "status", "created", "lessons", "checked"):
            table.add_column(column)
        for v in found:
            table.add_row(str(v.version), v.status, v.created_at, str(len(v.lessons)), _said(v.note) if v.note and
                          "wins" in v.note else "")  # fmt: skip
        stdout().print(table if found else f"{model} has no lessons yet (adapter-critic lessons learn {model})")

    _in_process(config_path, model, work)


@lessons.command("show")
@click.argument("model")
@click.argument("version", required=False, type=int)
@config_option
def show(model: str, version: int | None, config_path: str | None) -> None:
    """A version's lessons (default: the active one), with what changed from the version it was learnt after."""
    from ..store import lessons as kept

    async def work(endpoint: InProcess, learning: Any) -> None:
        assert endpoint.service.store is not None
        engine = endpoint.service.store.database.engine
        found = await (kept.active(engine, model) if version is None else kept.version(engine, model, version))
        if found is None:
            raise CliError(f"{model} has no {'active version' if version is None else f'version {version}'}")
        parent = None if found.parent is None else await kept.version(engine, model, found.parent)
        added, removed = kept.changes(found, parent)
        console = stdout()
        console.print(f"{model} lessons version {found.version} ({found.status}, {found.created_at})", soft_wrap=True)
        for lesson in found.lessons:
            console.print(f"{'+ ' if lesson in added else '  '}{lesson}", soft_wrap=True, markup=False)
        for lesson in removed:
            console.print(f"- {lesson}", soft_wrap=True, markup=False)
        if found.note and "wins" in found.note:
            console.print(_said(found.note), soft_wrap=True)

    _in_process(config_path, model, work)


@lessons.command("activate")
@click.argument("model")
@click.argument("version", type=int)
@config_option
@click.option("--force", is_flag=True, help="without checking it on the held-out items first")
def activate(model: str, version: int, config_path: str | None, force: bool) -> None:
    """Make VERSION the one MODEL's runs use, once the check on held-out items says it is not worse than the
    active one (`--force`: without the check)."""
    from ..store import lessons as kept

    async def work(endpoint: InProcess, learning: Any) -> None:
        assert endpoint.service.store is not None
        engine = endpoint.service.store.database.engine
        found = await kept.version(engine, model, version)
        if found is None:
            raise CliError(f"{model} has no version {version} (adapter-critic lessons list {model})")
        current = await kept.active(engine, model)
        check = None
        if not force:
            _, items = _holdout(learning, await _feedback_runs(endpoint, model), 0)
            check = await _check(endpoint, model, learning, items, (current.version if current else None, version), 4)
            if not check["not_worse"]:
                raise CliError(f"version {version} is worse than the lessons in use, {_said(check)}; --force to use it")
        await kept.settle(engine, model, version, "active", check)
        stdout().print(f"version {version} active" + (f", {_said(check)}" if check else " (not checked: --force)"))

    _in_process(config_path, model, work)


@lessons.command("rollback")
@click.argument("model")
@config_option
def rollback(model: str, config_path: str | None) -> None:
    """Give MODEL's runs the version that was active before the active one (none: its runs go without lessons)."""
    from ..store import lessons as kept

    async def work(endpoint: InProcess, learning: Any) -> None:
        assert endpoint.service.store is not None
        engine = endpoint.service.store.database.engine
        current = await kept.active(engine, model)
        if current is None:
            raise CliError(f"{model} has no active lessons to roll back")
        if current.parent is None:
            await kept.settle(engine, model, current.version, "retired")
            stdout().print(f"version {current.version} retired; {model} runs without lessons")
            return
        await kept.settle(engine, model, current.parent, "active")
        stdout().print(f"version {current.parent} active again (version {current.version} retired)")

    _in_process(config_path, model, work)
