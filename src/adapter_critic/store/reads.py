"""Table rows as the API's shapes (`records`): a run's summary, its whole record with its stages in order.

The inverse of `rows`: texts a run keeps once are read back where the API shows them — the client's messages for
a stage that sent them (`stages.request_messages`), a stage's output for the answer or an intermediate value that
is that output (`runs.from_stages`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .records import (
    AttemptError,
    FromStages,
    RunDetail,
    RunSummary,
    StoredAnswer,
    StoredAttempt,
    StoredError,
    StoredRequest,
    StoredStage,
    Tokens,
    iso,
)

_tokens = msgspec.json.Decoder(Tokens)
_error = msgspec.json.Decoder(StoredError)
_request = msgspec.json.Decoder(StoredRequest)
_answer = msgspec.json.Decoder(StoredAnswer)
_intermediate = msgspec.json.Decoder(dict[str, Any])
_from_stages = msgspec.json.Decoder(FromStages)
_attempts = msgspec.json.Decoder(list[StoredAttempt])
_attempt_error_decoder = msgspec.json.Decoder(AttemptError)
_any = msgspec.json.Decoder()


def _maybe(decoder: msgspec.json.Decoder[Any], text: str | None) -> Any:
    return None if text is None else decoder.decode(text)


def summary_fields(row: Mapping[Any, Any]) -> dict[str, Any]:
    finished = row["finished_at"]
    return {
        "id": row["run_id"],
        "request_id": row["request_id"],
        "served_model": row["served_model"],
        "mode": row["mode"],
        "stream": bool(row["stream"]),
        "status": row["status"],
        "degraded": bool(row["degraded"]),
        "started_at": iso(row["started_at"]),
        "finished_at": None if finished is None else iso(finished),
        "duration_ms": row["duration_ms"],
        "usage": _maybe(_tokens, row["usage"]),
        "error": _maybe(_error, row["error"]),
    }


def summary(row: Mapping[Any, Any]) -> RunSummary:
    return RunSummary(**summary_fields(row))


def request_messages(request_json: str | None) -> list[Any] | None:
    """The client's messages of a run's stored request (None under capture `metadata`)."""
    request: StoredRequest | None = _maybe(_request, request_json)
    return None if request is None else request.messages


def detail(row: Mapping[Any, Any], stage_rows: Sequence[Mapping[Any, Any]]) -> RunDetail:
    request: StoredRequest | None = _maybe(_request, row["request"])
    messages = None if request is None else request.messages
    intermediate: dict[str, Any] = _maybe(_intermediate, row["intermediate"]) or {}
    answer: StoredAnswer | None = _maybe(_answer, row["answer"])
    from_stages: FromStages | None = _maybe(_from_stages, row["from_stages"])
    if from_stages is not None:  # texts kept once, in their stage's row
        outputs = {s["idx"]: s["output"] for s in stage_rows}
        for key, index in from_stages.intermediate.items():
            intermediate[key] = outputs.get(index)
        if answer is not None and from_stages.answer is not None:
            answer.content = outputs.get(from_stages.answer)
    return RunDetail(
        **summary_fields(row),
        capture=row["capture"],
        request=request,
        intermediate=intermediate,
        answer=answer,
        stages=[stage(s, messages) for s in stage_rows],
    )


def stage(row: Mapping[Any, Any], client_messages: list[Any] | None) -> StoredStage:
    """A stage as stored; `client_messages` are its run's request messages, for a stage that sent those."""
    return StoredStage(
        index=row["idx"],
        stage=row["stage"],
        status=row["status"],
        target_model=row["target_model"],
        target_host=row["target_host"],
        started_offset_ms=row["started_offset_ms"],
        elapsed_ms=row["elapsed_ms"],
        attempts=_attempts.decode(row["attempts"]),
        usage=_any.decode(row["usage"]),
        usage_reported=bool(row["usage_reported"]),
        messages=client_messages if row["request_messages"] else _maybe(_any, row["messages"]),
        output=row["output"],
        error=_maybe(_attempt_error_decoder, row["error"]),
    )
