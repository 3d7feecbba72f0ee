"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Feedback on runs (docs/guides/feedback.md): what a client sends (`FeedbackIn`, checked with a message that says
what to change) and the record the store's writer writes (`recorder.FeedbackGiven`); `feedback_reads` reads
entries back.

A score is a number from -1 (bad) to 1 (good); a thumbs up is 1, a thumbs down -1. A verdict (`accept` | `reject`)
judges one stage's output: `stage` names it (the last stage of that name, unless `stage_index` says which), and a
verdict needs a stage. Several entries per run are kept, each with its time and the named key that gave it.
"""

from __future__ import annotations

import math
import time
from typing import Literal

import msgspec

from ..errors import StoreError
from ..ids import new_id
from .recorder import FeedbackGiven
from .records import RunDetail

MAX_LABEL = 128
MAX_TEXT = 100_000  # a comment's or a corrected answer's characters
_SCORE = "`score` must be a number from -1 (bad) to 1 (good); thumbs: 1 or -1."
FIELDS = ("score", "label", "comment", "stage", "stage_index", "verdict", "corrected_answer")


class FeedbackInvalid(StoreError, ValueError):
    """Feedback that cannot be kept: the message says what to change; `param` names the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class FeedbackNotKept(StoreError, RuntimeError):
    """A feedback entry the store could not write (its queue full, the database failing)."""


class FeedbackIn(msgspec.Struct, forbid_unknown_fields=True):
    """The body of `POST /runs/{id}/feedback`."""

    score: float
    label: str | None = None
    comment: str | None = None
    stage: str | None = None
    stage_index: int | None = None
    verdict: Literal["accept", "reject"] | None = None
    corrected_answer: str | None = None


_decoder = msgspec.json.Decoder(FeedbackIn)


def decode_feedback(body: bytes) -> FeedbackIn:
    """The feedback in a request body, checked (`FeedbackInvalid` naming the field otherwise)."""
    if not body.strip():
        raise FeedbackInvalid('The body must be a JSON object with at least a `score`, e.g. {"score": 1}.')
    try:
        entry = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        said = str(exc)
        field = said.rpartition("`$.")[2].rstrip("`") if "`$." in said else None
        if said.startswith("Object contains unknown field"):
            name = said.split("`")[1]
            raise FeedbackInvalid(f"Unknown field {name!r}; the fields are {', '.join(FIELDS)}.", name) from None
        if said.startswith("Object missing required field"):
            raise FeedbackInvalid(
                "`score` is required: a number from -1 (bad) to 1 (good); a thumbs up is 1, down -1.", "score"
            ) from None
        if field == "score":
            raise FeedbackInvalid(_SCORE, "score") from None
        if field == "verdict":
            raise FeedbackInvalid("`verdict` must be accept or reject (of `stage`'s output).", "verdict") from None
        if field is None:
            raise FeedbackInvalid(f'The body must be a JSON object such as {{"score": 1}} ({said}).') from None
        raise FeedbackInvalid(f"{said.split(' - at ')[0]} for `{field}`.", field) from None
    except msgspec.DecodeError:
        raise FeedbackInvalid('The body is not JSON: send an object such as {"score": 1, "comment": "…"}.') from None
    return checked(entry)


def checked(entry: FeedbackIn) -> FeedbackIn:
    """`entry` if its values are in range (the CLI's options are checked here too)."""
    if not math.isfinite(entry.score) or not -1 <= entry.score <= 1:
        raise FeedbackInvalid(_SCORE, "score")
    if entry.label is not None and not 0 < len(entry.label) <= MAX_LABEL:
        raise FeedbackInvalid(f"`label` must be 1 to {MAX_LABEL} characters.", "label")
    for name in ("comment", "corrected_answer"):
        value = getattr(entry, name)
        if value is not None and len(value) > MAX_TEXT:
            raise FeedbackInvalid(f"`{name}` is longer than {MAX_TEXT} characters.", name)
    if entry.verdict is not None and entry.stage is None and entry.stage_index is None:
        raise FeedbackInvalid("A `verdict` judges one stage's output: give `stage` (its name, e.g. critic).", "stage")
    if (entry.stage is not None or entry.stage_index is not None) and entry.verdict is None:
        raise FeedbackInvalid("`stage` goes with a `verdict`: accept or reject that stage's output.", "verdict")
    return entry


def stage_judged(entry: FeedbackIn, run: RunDetail) -> tuple[str | None, int | None]:
    """The stage `entry` judges in `run`: its name and index (None, None: no stage)."""
    if entry.stage is None and entry.stage_index is None:
        return None, None
    names = sorted({stage.stage for stage in run.stages})
    if entry.stage_index is not None:
        found = [stage for stage in run.stages if stage.index == entry.stage_index]
        if not found or (entry.stage is not None and found[0].stage != entry.stage):
            where = ", ".join(f"{stage.index}: {stage.stage}" for stage in run.stages) or "none"
            raise FeedbackInvalid(f"Run {run.id!r} has no such stage; its stages are {where}.", "stage_index")
        return found[0].stage, found[0].index
    matches = [stage for stage in run.stages if stage.stage == entry.stage]
    if not matches:
        raise FeedbackInvalid(
            f"Run {run.id!r} has no stage {entry.stage!r}; its stages are {', '.join(names) or 'none'}.", "stage"
        )
    return matches[-1].stage, matches[-1].index


def given(
    entry: FeedbackIn,
    run: RunDetail,
    *,
    key_name: str | None,
    via: str,
    secret: str | None = None,
) -> FeedbackGiven:
    """The record of `entry` on `run`, to write (`RunStore.give_feedback`)."""
    stage, index = stage_judged(entry, run)
    return FeedbackGiven(
        feedback_id=new_id("fb_"),
        run_id=run.id,
        created_at=time.time(),
        score=float(entry.score),
        via=via,
        key_name=key_name,
        label=entry.label,
        comment=entry.comment,
        stage=stage,
        stage_index=index,
        verdict=entry.verdict,
        corrected_answer=entry.corrected_answer,
        secret=secret,
    )


def verdict_label(record: FeedbackGiven) -> str:
    """The metric's `verdict` label: a stage's `accept`/`reject`, else the score's sign (`positive`, `negative`,
    `neutral`)."""
    if record.verdict is not None:
        return record.verdict
    return "positive" if record.score > 0 else "negative" if record.score < 0 else "neutral"
