"""Store records as table rows (`reads` turns them back into the API's shapes).

Writing (in the background writer, never on a request's task): every text value is JSON-encoded and then has
every secret masked (`cleaning.Cleaner`) — the values of the configured key env vars in each form an upstream may echo
them, any bearer token, any URL userinfo — whatever the capture level. Under capture `metadata` no message text is
kept: no messages, no stage outputs, no answer text, intermediate values null.

A row is a tuple in its statement's column order (`OPEN_COLUMNS`, `CLOSED_COLUMNS`, `STAGE_COLUMNS`). A run's end
is its status, times, usage and error, and one JSON document (`records.RunEnd`) that holds the rest and the stages
written with it: a few texts to encode and mask, not a dozen, and for a run that starts and ends within one batch
(most runs), one row instead of one per stage more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..core import Usage
from ..errors import APIError, render_error
from ..events import StageFinished
from .cleaning import Cleaner, attempt_error, target_parts
from .recorder import RunClosed, RunOpened, StageDone
from .records import AttemptError, FromStages, StoredAnswer, StoredAttempt, StoredError, Tokens


def _usage(usage: Usage) -> Tokens:
    return Tokens(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


class _Envelope(msgspec.Struct):
    message: str = ""
    type: str = "server_error"
    param: str | None = None
    code: str | int | None = None


def stored_error(error: APIError, clean: Cleaner) -> StoredError:
    """The §7 error the client got, as stored."""
    rendered = render_error(error)
    try:
        inner = msgspec.json.decode(rendered.body, type=dict[str, _Envelope])["error"]
    except (msgspec.DecodeError, KeyError):
        inner = _Envelope(message=error.message, type=error.error_type)
    code = None if inner.code is None else str(inner.code)
    return StoredError(rendered.status, inner.type, clean.text(inner.message) or "", inner.param, code)


# -- records -> rows ------------------------------------------------------------------------------------------------

# The columns of a run's row as its start sets them, and as its end sets them (`opened_row`, `closed_values`).
OPEN_COLUMNS = (
    "run_id", "request_id", "served_model", "mode", "stream", "started_at", "capture", "instance", "request"
)  # fmt: skip
CLOSED_COLUMNS = ("status", "degraded", "finished_at", "duration_ms", "usage", "error", "record")
RUNNING: tuple[Any, ...] = ("running", False, None, None, None, None, None)  # `CLOSED_COLUMNS` of a run still going
STAGE_COLUMNS = (
    "run_id", "idx", "stage", "status", "target_model", "target_host", "started_offset_ms", "elapsed_ms", "attempts",
    "usage", "usage_reported", "messages", "output", "error", "request_messages",
)  # fmt: skip
Row = tuple[Any, ...]


def opened_row(record: RunOpened, instance: str, clean: Cleaner) -> Row:
    """A run's row as it starts (`OPEN_COLUMNS`)."""
    request = record.request
    options: dict[str, Any] = dict(request.options)
    if request.stream:
        options["stream"] = True
    if request.overrides is not None:
        options[request.overrides_param] = request.overrides
    messages = request.messages_json if record.capture == "full" else None
    return (
        record.run_id,
        record.request_id,
        clean.name(record.served_model),
        record.mode,
        record.stream,
        record.started_at,
        record.capture,
        instance,
        clean.json({"options": options, "messages": messages}),
    )


def _stage_status(finished: StageFinished) -> str:
    if finished.error is not None:
        return "error"
    # No error, yet no attempt answered: the call was cancelled while an attempt was under way.
    answered = finished.attempts and finished.attempts[-1].error is None
    return "ok" if answered else "cancelled"


def stage_row(record: StageDone, clean: Cleaner) -> Row:
    """A stage of a run that goes on after its batch, as a row of `stages` (`STAGE_COLUMNS`)."""
    finished = record.finished
    model, host = target_parts(finished.target)
    full = record.capture == "full"
    return (
        record.run_id,
        record.index,
        finished.stage,
        _stage_status(finished),
        clean.name(model),
        clean.name(host),
        record.started_offset_ms,
        round(finished.elapsed_ms, 3),
        clean.json(clean.attempts(finished)),
        clean.json(finished.usage),
        finished.reported,
        clean.json(record.messages) if full else None,
        clean.text(finished.output) if full else None,
        clean.json(attempt_error(finished.error)),
        full and record.request_messages,
    )


class _Stage(msgspec.Struct):
    """A stage in a run's end (`records.RunEnd.stages`): `records.StoredStage`'s JSON, made from the run's objects."""

    index: int
    stage: str
    status: str
    target_model: str
    target_host: str
    started_offset_ms: float
    elapsed_ms: float
    attempts: list[StoredAttempt]
    usage: Usage
    usage_reported: bool
    messages: Any = None
    output: str | None = None
    error: AttemptError | None = None


class _End(msgspec.Struct, omit_defaults=True):
    """`records.RunEnd` as written (its stages as `_Stage`s)."""

    answer: StoredAnswer
    intermediate: dict[str, Any] = {}
    from_stages: FromStages | None = None
    stages: list[_Stage] = []
    request_messages: list[int] = []


def _kept_stage(record: StageDone, clean: Cleaner) -> _Stage:
    finished = record.finished
    full = record.capture == "full"
    return _Stage(
        record.index,
        finished.stage,
        _stage_status(finished),
        *target_parts(finished.target),
        record.started_offset_ms,
        round(finished.elapsed_ms, 3),
        clean.attempts(finished),
        finished.usage,
        finished.reported,
        record.messages if full else None,
        finished.output if full else None,
        attempt_error(finished.error),
    )


def closed_values(record: RunClosed, stages: Sequence[StageDone], clean: Cleaner) -> Row:
    """A run's end as `CLOSED_COLUMNS` take it: its status, times, usage and error, and its `RunEnd` document, which
    holds `stages` (the run's stage records of the same batch: they are written there, not as rows). A text of the
    answer or of `intermediate` that is one of those stages' outputs is kept once, in the stage (`from_stages`)."""
    full = record.capture == "full"
    answer = record.answer
    content = answer.content if full else None
    intermediate = record.intermediate if full else dict.fromkeys(record.intermediate)
    from_stages = None
    if full and stages:
        outputs = [(s.index, s.finished.output) for s in stages if s.finished.output]
        found = _kept_once(outputs, content, intermediate)
        if found.answer is not None:
            content = None
        if found.intermediate:  # null where the stage holds the text
            intermediate = {key: None if key in found.intermediate else v for key, v in intermediate.items()}
        if found.answer is not None or found.intermediate:
            from_stages = found
    end = _End(
        answer=StoredAnswer(answer.finish_reason, content, answer.tool_calls if full else None),
        intermediate=intermediate,
        from_stages=from_stages,
        stages=[_kept_stage(stage, clean) for stage in stages],
        request_messages=[stage.index for stage in stages if full and stage.request_messages],
    )
    error = clean.json(stored_error(record.error, clean)) if record.error is not None else None
    usage = clean.json(_usage(record.usage))
    return (
        record.status,
        record.status == "degraded",
        record.finished_at,
        record.duration_ms,
        usage,
        error,
        clean.json(end),
    )


def _kept_once(outputs: Sequence[tuple[int, str]], content: str | None, intermediate: Mapping[str, Any]) -> FromStages:
    """Which texts are a stage's output (the latest stage's, when several said the same)."""

    def stage_of(value: Any) -> int | None:
        if type(value) is str and value:
            for index, output in reversed(outputs):
                if value is output or value == output:
                    return index
        return None

    found = FromStages(answer=stage_of(content))
    for key, value in intermediate.items():
        index = stage_of(value)
        if index is not None:
            found.intermediate[key] = index
    return found
