"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic eval DATASET --models A,B`: run a dataset through served models, score, and compare them.

In-process against a config (`--config`, or the built-in demo; no server needed) or against any
OpenAI-compatible server (`--base-url`). Everything is checked before the first request: the dataset line by line,
the scorers, the models the endpoint serves. Ctrl-C stops at once: the results so far are in `results.jsonl`, the
statistics of them in `summary.json`, and `--resume` continues.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
import click
from click.core import ParameterSource

from ..evals.dataset import DatasetError, Item, load_dataset
from ..evals.endpoint import Endpoint, EndpointError
from ..evals.results import Result, ResultsFile, summarize, write_summary
from ..evals.runner import EndpointJudge, jobs, run_jobs
from ..evals.scorers import Judge, Scorer, ScorerError, make_scorer
from ..evals.weighed import score_for_cost
from .console import stderr, stdout
from .errors import CliError, Interrupted
from .eval_plot import write_plot
from .eval_report import Progress, model_table, paired_table, weighed_table
from .options import endpoint_options, open_endpoint, require_file


@click.command("eval")
@click.argument("dataset", metavar="DATASET")
@click.option("--models", "-m", required=True, help="models to compare, comma-separated; the first is the baseline")
@endpoint_options
@click.option(
    "--scorer",
    "-s",
    default="exact",
    show_default=True,
    help="exact, contains, regex:P, json, judge:MODEL, module:fn",
)
@click.option("--output-dir", "-o", default="eval-results", show_default=True, type=click.Path(file_okay=False))
@click.option("--concurrency", "-j", default=4, show_default=True, type=click.IntRange(1, 256), help="requests at once")
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="per request",
)
@click.option(
    "--retries",
    default=2,
    show_default=True,
    type=click.IntRange(0, 10),
    help="with --base-url: per request",
)
@click.option("--limit", type=click.IntRange(1), help="only the first N items")
@click.option("--resume", is_flag=True, help="keep the results already in --output-dir and run only the rest")
@click.option(
    "--effort",
    type=click.FloatRange(0, 1),
    help="also weigh each model's score for its cost at this effort, as an auto model's router does",
)
@click.option(
    "--cache",
    is_flag=True,
    help="ask to be answered from the cache of served models with cache = true: an answer had before costs nothing",
)
def eval_command(
    dataset: str,
    models: str,
    config_path: str | None,
    base_url: str | None,
    api_key_env: str | None,
    scorer: str,
    output_dir: str,
    concurrency: int,
    timeout: float,
    retries: int,
    limit: int | None,
    resume: bool,
    effort: float | None,
    cache: bool,
) -> None:
    """Run DATASET (JSONL: id, messages or prompt, expected…) through each model, score the answers, and print
    each model's mean score with a 95% CI, tokens per stage, latency and errors, and paired comparisons."""
    path = require_file(dataset, "dataset")
    try:
        items = load_dataset(path)[:limit]
    except DatasetError as exc:
        raise CliError(str(exc)) from None
    names = [name.strip() for name in models.split(",") if name.strip()]
    if not names:
        raise CliError("--models names no model")
    if len(set(names)) != len(names):
        raise CliError(f"--models names a model twice: {models}")
    judge = EndpointJudge()
    scorers = scorers_for(items, scorer, judge, path)
    if click.get_current_context().get_parameter_source("scorer") is not ParameterSource.DEFAULT:
        _warn_keptscorers_for(items, scorer, path)
    judges = sorted({spec.spec.partition(":")[2] for spec in scorers.values() if spec.spec.startswith("judge:")})
    out = Path(output_dir)

    opened = open_endpoint(config_path, base_url, api_key_env, seconds=timeout, retries=retries)

    async def run() -> None:
        try:
            async with opened as endpoint:
                judge.bind(endpoint)
                await endpoint.require([*names, *(j for j in judges if j not in names)])
                scorer_of: Callable[[Item], Scorer] = lambda item: scorers[item.scorer or scorer]  # noqa: E731
                about = {"dataset": str(path), "endpoint": endpoint.describe, "scorer": scorer}
                await _evaluate(endpoint, items, names, scorer_of, out, resume, concurrency, about, cache, effort)
        except EndpointError as exc:
            raise CliError(str(exc)) from None

    anyio.run(run)


def scorers_for(items: list[Item], default: str, judge: Judge, path: Path) -> dict[str, Scorer]:
    """Every scorer the run uses, built and checked against the items that use it, before anything runs."""
    scorers: dict[str, Scorer] = {}
    for item in items:
        spec = item.scorer or default
        if spec not in scorers:
            try:
                scorers[spec] = make_scorer(spec, judge)
            except ScorerError as exc:
                raise CliError(f"{path}:{item.line}: {exc}" if item.scorer else f"--scorer: {exc}") from None
        missing = scorers[spec].misses(item)
        if missing:
            raise CliError(f"{path}:{item.line}: {missing}")
    return scorers


def _warn_keptscorers_for(items: list[Item], scorer: str, path: Path) -> None:
    """`--scorer` given, and lines that name their own: a line's `scorer` wins, which the user may not expect."""
    kept = sum(1 for item in items if item.scorer)
    if kept:
        rest = f"the other {len(items) - kept}" if kept < len(items) else "none of them"
        said = f'warning: {kept} of {len(items)} lines of {path} keep their own scorer (a line\'s "scorer" wins)'
        stderr().print(f"{said}; --scorer {scorer} scores {rest}", soft_wrap=True, markup=False, highlight=False)


async def _evaluate(
    endpoint: Endpoint,
    items: list[Item],
    models: list[str],
    scorer_of: Callable[[Item], Scorer],
    out: Path,
    resume: bool,
    concurrency: int,
    about: dict[str, str],
    cache: bool = False,
    effort: float | None = None,
) -> None:
    results = ResultsFile(out, resume=resume)
    todo = jobs(items, models, results.done())
    progress = Progress(stderr(), total=len(items) * len(models), done=len(items) * len(models) - len(todo))
    if results.unreadable:
        progress.notice(f"{results.unreadable} unreadable line(s) in {results.path} were skipped")
    interrupted = False

    def finished(result: Result) -> None:
        results.write(result)
        progress.advance(result)

    try:
        with progress:
            async with anyio.create_task_group() as tg:

                async def on_interrupt(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                    nonlocal interrupted
                    with anyio.open_signal_receiver(signal.SIGINT) as signals:
                        task_status.started()  # Ctrl-C is ours before the first request goes out
                        async for _ in signals:
                            interrupted = True
                            tg.cancel_scope.cancel()

                await tg.start(on_interrupt)
                await run_jobs(endpoint, todo, scorer_of, finished, concurrency=concurrency, cache=cache)
                tg.cancel_scope.cancel()
    finally:
        results.close()
    item_ids = [item.id for item in items]
    summary = {**about, **summarize(results.results, item_ids, models)}
    summary["complete"] = all((i, m) in results.results for i in item_ids for m in models)
    summary["interrupted"] = interrupted
    if effort is not None:
        summary["score_for_cost"] = score_for_cost(summary, effort)
        write_plot(out, summary["score_for_cost"])
    summary_path = write_summary(out, summary)
    console = stdout()
    console.print(model_table(summary))
    if effort is not None:
        console.print(weighed_table(summary["score_for_cost"]))
    if len(models) > 1:
        console.print(paired_table(summary))
    console.print(f"results: {results.path}  summary: {summary_path}", soft_wrap=True)
    if endpoint.recorded_to is not None:
        console.print(f"runs recorded to {endpoint.recorded_to} (adapter-critic runs show RUN_ID)", soft_wrap=True)
    done = sum(1 for i in item_ids for m in models if (i, m) in results.results)
    if interrupted:
        raise Interrupted(f"interrupted: {done} of {len(item_ids) * len(models)} done; --resume continues")
    wanted = {(i, m) for i in item_ids for m in models}
    errors = [r for r in results.results.values() if r.error is not None and r.key in wanted]
    if errors:
        raise CliError(
            f"{len(errors)} of {done} requests failed (first: {errors[0].model} on {errors[0].id}: {errors[0].error})"
        )
