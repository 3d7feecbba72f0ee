"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Store records as table rows (`reads` turns them back into the API's shapes).

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
from typing import Any, Literal, cast

import msgspec

from ..core import Usage
from ..errors import APIError, render_error
from ..events import StageFinished
from .cleaning import Cleaner, attempt_error, target_parts
from .recorder import CachePut, FeedbackGiven, RunClosed, RunOpened, StageDone
from .records import FromStages, RunEnd, StageCost, StoredAnswer, StoredError, StoredStage, Tokens


def _usage(usage: Usage) -> Tokens:
    return Tokens(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


class _Envelope(msgspec.Struct):
    message: str = ""
    type: str = "server_error"
    param: str | None = None
    code: str | int | None = None


def error_fields(error: APIError) -> StoredError:
    """The error the client got (its OpenAI envelope), its message not masked yet."""
    rendered = render_error(error)
    try:
        inner = msgspec.json.decode(rendered.body, type=dict[str, _Envelope])["error"]
    except (msgspec.DecodeError, KeyError):
        inner = _Envelope(message=error.message, type=error.error_type)
    code = None if inner.code is None else str(inner.code)
    return StoredError(rendered.status, inner.type, inner.message, inner.param, code)


def stored_error(error: APIError | StoredError, clean: Cleaner) -> StoredError:
    """The error the client got, as stored: its message masked (`error_fields` of an `APIError`; a writer process
    gets those fields)."""
    fields = error if type(error) is StoredError else error_fields(cast(APIError, error))
    return msgspec.structs.replace(fields, message=clean.text(fields.message) or "")


# -- records -> rows ------------------------------------------------------------------------------------------------

# The columns of a run's row as its start sets them, and as its end sets them (`opened_row`, `closed_values`).
OPEN_COLUMNS = (
    "run_id", "request_id", "served_model", "mode", "stream", "started_at", "capture", "instance", "request",
    "key_name", "parent_run_id", "parent_stage", "cached_from",
)  # fmt: skip
CLOSED_COLUMNS = (
    "status", "degraded", "finished_at", "duration_ms", "usage", "error", "record",
    "cost_currency", "cost_total", "cost_known", "cost_unknown",
)  # fmt: skip
RUNNING: tuple[Any, ...] = ("running", False, *[None] * (len(CLOSED_COLUMNS) - 2))  # the end of a run still going
STAGE_COLUMNS = (
    "run_id", "idx", "stage", "status", "target_model", "target_host", "started_offset_ms", "elapsed_ms", "attempts",
    "usage", "usage_reported", "messages", "output", "error", "request_messages", "cost", "cost_currency",
    "child_run_id",
)  # fmt: skip
CACHE_COLUMNS = ("key", "run_id", "served_model", "created_at", "expires_at", "entry")
Row = tuple[Any, ...]
FEEDBACK_COLUMNS = (
    "feedback_id", "run_id", "created_at", "key_name", "via", "score", "label", "comment", "stage", "stage_index",
    "verdict", "corrected_answer",
)  # fmt: skip


def cache_row(record: CachePut, clean: Cleaner) -> Row:
    """A cached answer as a row of `cache` (`CACHE_COLUMNS`), its secrets masked like every text of the store."""
    return (
        record.key,
        record.run_id,
        clean.name(record.served_model),
        record.created_at,
        record.expires_at,
        clean.json(record.entry),
    )


def feedback_row(record: FeedbackGiven, clean: Cleaner) -> Row:
    """A feedback entry as a row of `feedback` (`FEEDBACK_COLUMNS`), its texts' secrets masked."""
    return (
        record.feedback_id,
        record.run_id,
        record.created_at,
        record.key_name,
        record.via,
        record.score,
        clean.text(record.label),
        clean.text(record.comment),
        record.stage,
        record.stage_index,
        record.verdict,
        clean.text(record.corrected_answer),
    )


def opened_row(record: RunOpened, instance: str, clean: Cleaner) -> Row:
    """A run's row as it starts (`OPEN_COLUMNS`)."""
    request = record.request
    options: dict[str, Any] = dict(request.options)
    if request.stream:
        options["stream"] = True
    if request.overrides is not None:
        options[request.overrides_param] = request.overrides.given
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
        record.key_name,
        record.parent_run_id,
        None if record.parent_stage is None else clean.name(record.parent_stage),
        record.cached_from,
    )


def _stage_status(finished: StageFinished) -> Literal["ok", "error", "cancelled"]:
    if finished.error is not None:
        return "error"
    # No error, yet no attempt answered: the call was cancelled while an attempt was under way.
    answered = finished.attempts and finished.attempts[-1].error is None
    return "ok" if answered else "cancelled"


def _stored_stage(record: StageDone, clean: Cleaner) -> StoredStage:
    """A stage as stored (messages and output under capture `full` only; a stage that sent the client's own messages
    has none: they are the run's request's)."""
    finished = record.finished
    full = record.capture == "full"
    model, host = target_parts(finished.target)
    return StoredStage(
        index=record.index,
        stage=finished.stage,
        status=_stage_status(finished),
        target_model=model,
        target_host=host,
        started_offset_ms=record.started_offset_ms,
        elapsed_ms=round(finished.elapsed_ms, 3),
        attempts=clean.attempts(finished),
        usage=msgspec.to_builtins(finished.usage),  # the counts and the details the upstream gave, never `null`s
        usage_reported=finished.reported,
        messages=record.messages if full else None,
        output=finished.output if full else None,
        error=attempt_error(finished.error),
        cost=None if finished.cost is None else StageCost(finished.cost.currency, finished.cost.amount),
        child_run_id=finished.child,
    )


def stage_row(record: StageDone, clean: Cleaner) -> Row:
    """A stage of a run that goes on after its batch, as a row of `stages` (`STAGE_COLUMNS`)."""
    stage = _stored_stage(record, clean)
    return (
        record.run_id,
        stage.index,
        stage.stage,
        stage.status,
        clean.name(stage.target_model),
        clean.name(stage.target_host),
        stage.started_offset_ms,
        stage.elapsed_ms,
        clean.json(stage.attempts),
        clean.json(stage.usage),
        stage.usage_reported,
        clean.json(stage.messages),
        clean.text(stage.output),
        clean.json(stage.error),
        record.capture == "full" and record.request_messages,
        None if stage.cost is None else stage.cost.amount,
        None if stage.cost is None else stage.cost.currency,
        stage.child_run_id,
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
    end = RunEnd(
        answer=StoredAnswer(answer.finish_reason, content, answer.tool_calls if full else None),
        intermediate=intermediate,
        from_stages=from_stages,
        stages=[_stored_stage(stage, clean) for stage in stages],
        request_messages=[stage.index for stage in stages if full and stage.request_messages],
    )
    error = clean.json(stored_error(record.error, clean)) if record.error is not None else None
    usage = clean.json(_usage(record.usage))
    cost = record.cost
    return (
        record.status,
        record.status == "degraded",
        record.finished_at,
        record.duration_ms,
        usage,
        error,
        clean.json(end),
        *(
            (None, None, None, None)
            if cost is None
            else (cost.currency, cost.total, cost.total_known, clean.json(cost.unknown_stages or None))
        ),
    )


def stage_of(value: Any, outputs: Sequence[tuple[int, str]]) -> int | None:
    """The index of the stage whose output `value` is (the latest stage's, when several said the same), or None."""
    if type(value) is str and value:
        for index, output in reversed(outputs):
            if value is output or value == output:
                return index
    return None


def _kept_once(outputs: Sequence[tuple[int, str]], content: str | None, intermediate: Mapping[str, Any]) -> FromStages:
    """Which texts are a stage's output."""
    found = FromStages(answer=stage_of(content, outputs))
    for key, value in intermediate.items():
        index = stage_of(value, outputs)
        if index is not None:
            found.intermediate[key] = index
    return found
