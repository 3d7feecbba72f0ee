"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Running the search (`tuning.search`) against an endpoint: each rung's requests with bounded concurrency, each
result written as it comes (so an interrupted `tune` resumes where it stopped: a result already in the output
directory is not asked again, and what it cost counts against the budget), then the held-out check of the front.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from ..evals.dataset import Item
from ..evals.endpoint import Endpoint
from ..evals.results import Result, ResultsFile
from ..evals.runner import run_one
from ..evals.scorers import Scorer
from .candidates import BASELINE, Candidate
from .search import Budget, Race, rungs

Job = tuple[Item, Candidate]


@dataclass(frozen=True)
class Plan:
    """What one `tune` asks: the candidates over `model` (the upstream model's name, prefixed per candidate), the
    training and held-out items, how each is scored, and how many requests go at once."""

    model: str
    candidates: list[Candidate]
    train: list[Item]
    holdout: list[Item]
    scorer_of: Callable[[Item], Scorer]
    concurrency: int


@dataclass
class Outcome:
    """What the search found: the race (results, rungs reached, finalists), the front on the training items, and
    the front again on the held-out ones (the same when nothing was held out), and whether the budget ran out."""

    race: Race
    train_front: list[str]
    front: list[str]
    checked: list[str]  # the candidates asked the held-out items: the training front and the baseline
    out_of_budget: bool


class Reporter:
    """What a run tells as it goes (a progress bar per rung, a line per rung): the CLI's to draw."""

    def rung(self, number: int, of: int, labels: Sequence[str], items: int, todo: int) -> Callable[[Result], None]:
        return lambda result: None

    def done(self) -> None:
        return None


async def run(
    endpoint: Endpoint,
    plan: Plan,
    results: ResultsFile,
    budget: Budget,
    cost_of: Callable[[list[Result]], float],
    reporter: Reporter,
) -> Outcome:
    race = Race(plan.candidates, results.results, cost_of)
    for result in results.results.values():  # resumed: what earlier runs spent counts
        budget.charge(result)
    by_label = {candidate.label: candidate for candidate in plan.candidates}
    alive = list(by_label)
    sizes = rungs(len(alive) - 1, len(plan.train))
    steps = len(sizes) + (1 if plan.holdout else 0)
    for number, size in enumerate(sizes):
        items = plan.train[:size]
        jobs = [(item, by_label[label]) for item in items for label in alive]
        await _ask(endpoint, plan, jobs, results, budget, reporter.rung(number + 1, steps, alive, size, len(jobs)))
        for label in alive:
            race.reached[label] = size
        if budget.spent() or number == len(sizes) - 1:
            break
        alive = race.keep(alive, [item.id for item in items])
    race.finalists = alive
    train_ids = [item.id for item in plan.train]
    train_front = race.front(alive, train_ids)
    checked = [BASELINE, *(label for label in train_front if label != BASELINE)]
    front = train_front
    if plan.holdout and not budget.spent():
        jobs = [(item, by_label[label]) for item in plan.holdout for label in checked]
        done = reporter.rung(steps, steps, checked, len(plan.holdout), len(jobs))
        await _ask(endpoint, plan, jobs, results, budget, done)
        front = race.front(checked, [item.id for item in plan.holdout])
    reporter.done()
    return Outcome(race, train_front, front, checked, budget.spent())


async def _ask(
    endpoint: Endpoint,
    plan: Plan,
    jobs: list[Job],
    results: ResultsFile,
    budget: Budget,
    on_result: Callable[[Result], None],
) -> None:
    """Each job not already answered, `plan.concurrency` at once, until the budget is spent."""
    done = results.done()
    pending = iter([(item, c) for item, c in jobs if (item.id, c.label) not in done])

    async def worker() -> None:
        for item, candidate in pending:  # one shared iterator: each job is taken once
            if budget.spent():
                return
            scorer = plan.scorer_of(item)
            model = candidate.model(plan.model)
            result = await run_one(endpoint, item, model, scorer, settings=candidate.settings, label=candidate.label)
            results.write(result)
            budget.charge(result)
            on_result(result)

    async with anyio.create_task_group() as tg:
        for _ in range(plan.concurrency):
            tg.start_soon(worker)
