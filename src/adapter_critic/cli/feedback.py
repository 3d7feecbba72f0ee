"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic runs feedback ID --score …`: a feedback entry on a recorded run, written to the run store itself (as
the other `runs` commands read it: no key, so `key_name` is null and `via` is `cli`); and the eval dataset
`runs export --as-dataset FILE` writes from the runs with feedback (docs/guides/feedback.md).

A dataset line is the run's messages and, as `expected`, its newest corrected answer, else its own answer when its
feedback's mean score is at least `--min-score`. A run with neither — negative feedback only, and no correction —
is left out, and so is one recorded without its messages (capture `metadata`); the command says how many and why.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import IO, Any, Literal

import anyio
import click

from ..store.feedback import FeedbackIn, FeedbackInvalid, checked, given
from ..store.records import RunDetail
from .errors import CliError
from .store import reading, store_options

MIN_SCORE = 0.5


@click.command("feedback")
@click.argument("run_id", metavar="ID")
@store_options
@click.option("--score", required=True, type=float, help="-1 (bad) to 1 (good); a thumbs up is 1, down -1")
@click.option("--comment", help="what was good or wrong")
@click.option("--label", help="a short tag (e.g. wrong-format), up to 128 characters")
@click.option("--stage", metavar="S", help="the stage whose output --accept or --reject judges (e.g. critic)")
@click.option("--accept/--reject", "accept", default=None, help="the verdict on --stage's output")
@click.option("--corrected-answer", metavar="TEXT", help="the answer the run should have given")
def feedback_command(
    run_id: str,
    store_url: str | None,
    config_path: str | None,
    score: float,
    comment: str | None,
    label: str | None,
    stage: str | None,
    accept: bool | None,
    corrected_answer: str | None,
) -> None:
    """Give feedback on a recorded run (written to the run store)."""
    verdict: Literal["accept", "reject"] | None = None if accept is None else "accept" if accept else "reject"
    try:
        entry = checked(FeedbackIn(score, label, comment, stage, None, verdict, corrected_answer))
    except FeedbackInvalid as exc:
        raise CliError(_options(str(exc))) from None

    async def run() -> str:
        async with reading(store_url, config_path) as store:
            detail = await store.get_run(run_id)
            if detail is None:
                raise CliError(f"no run {run_id!r} in the run store")
            try:
                record = given(entry, detail, key_name=None, via="cli")
            except FeedbackInvalid as exc:
                raise CliError(_options(str(exc))) from None
            kept = await store.give_feedback(record)
            return kept.id

    click.echo(f"feedback {anyio.run(run)} given on run {run_id}")


def _options(message: str) -> str:
    """An API message in the command line's words (`corrected_answer` is `--corrected-answer`)."""
    for name in ("score", "label", "comment", "stage", "verdict", "corrected_answer"):
        message = message.replace(f"`{name}`", f"--{name.replace('_', '-')}")
    return message.replace("--verdict", "--accept or --reject")


def dataset_line(run: RunDetail, min_score: float) -> tuple[dict[str, Any] | None, str]:
    """The eval dataset line of a run with feedback, or None and why it is left out."""
    if run.request is None or not run.request.messages:
        return None, "recorded without its messages (capture = metadata)"
    corrections = [entry.corrected_answer for entry in run.feedback if entry.corrected_answer]
    score = statistics.fmean(entry.score for entry in run.feedback) if run.feedback else 0.0
    if corrections:
        expected, source = corrections[-1], "corrected"
    elif score >= min_score and run.answer is not None and run.answer.content:
        expected, source = run.answer.content, "accepted"
    elif score >= min_score:
        return None, "accepted but its answer has no text"
    else:
        return None, f"no corrected answer and a mean score below --min-score {min_score:g} (negative feedback)"
    metadata = {
        "run_id": run.id,
        "served_model": run.served_model,
        "source": source,
        "score": round(score, 4),
        "feedback": len(run.feedback),
    }
    return {"id": run.id, "messages": run.request.messages, "expected": expected, "metadata": metadata}, ""


async def write_dataset(store: Any, runs: Any, file: IO[str], min_score: float) -> tuple[int, Counter[str]]:
    """Write the dataset lines of `runs` (summaries of runs with feedback) to `file`: how many, and the reasons
    the others were left out."""
    written = 0
    left_out: Counter[str] = Counter()
    async for summary in runs:
        run = await store.get_run(summary.id)
        line, why = (None, "deleted meanwhile") if run is None else dataset_line(run, min_score)
        if line is None:
            left_out[why] += 1
            continue
        file.write(json.dumps(line, ensure_ascii=False) + "\n")
        written += 1
    return written, left_out


def dataset_note(written: int, left_out: Counter[str], output: str) -> str:
    """What `runs export --as-dataset` says on stderr."""
    note = f"{written} items written to {output}"
    total = sum(left_out.values())
    if total:
        why = "; ".join(f"{count} {reason}" for reason, count in left_out.most_common())
        note += f"; {total} run{'s' if total != 1 else ''} with feedback left out: {why}"
    return note
