"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Table rows as the API's shapes (`records`): a run's summary, its whole record with its stages in order.

The inverse of `rows`: texts a run keeps once are read back where the API shows them — the client's messages for
a stage that sent them (`request_messages`), a stage's output for the answer or an intermediate value that is that
output (`from_stages`). A run that ended since schema version 4 holds its end, besides status, times, usage and
error, in one document, `runs.record` (a `RunEnd`, with the stages written with it); one that ended before holds
it in the columns `intermediate`, `answer` and `from_stages`, its stages all rows of `stages`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .records import (
    AttemptError,
    FromStages,
    RunCost,
    RunDetail,
    RunEnd,
    RunSummary,
    StageCost,
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
_end = msgspec.json.Decoder(RunEnd)
_names = msgspec.json.Decoder(list[str])


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
        "cost": _run_cost(row),
        "parent_run_id": row["parent_run_id"],
        "parent_stage": row["parent_stage"],
        "cached_from": row["cached_from"],
        "key_name": row["key_name"],
    }


def _run_cost(row: Mapping[Any, Any]) -> RunCost | None:
    """A run's cost from its columns (None: the server had no prices, the run is going, or it ended before version
    5)."""
    currency = row["cost_currency"]
    if currency is None or row["cost_known"] is None:
        return None
    unknown = _maybe(_names, row["cost_unknown"]) or []
    return RunCost(currency, row["cost_total"], row["cost_known"], unknown)


def total_tokens(usage_json: str | None) -> int:
    """A run's total tokens from its `usage` column (0 while it runs)."""
    return 0 if usage_json is None else _tokens.decode(usage_json).total_tokens


def summary(row: Mapping[Any, Any]) -> RunSummary:
    return RunSummary(**summary_fields(row))


def request_messages(request_json: str | None) -> list[Any] | None:
    """The client's messages of a run's stored request (None under capture `metadata`)."""
    request: StoredRequest | None = _maybe(_request, request_json)
    return None if request is None else request.messages


def detail(
    row: Mapping[Any, Any], stage_rows: Sequence[Mapping[Any, Any]], child_rows: Sequence[Mapping[Any, Any]] = ()
) -> RunDetail:
    """A run's whole record from its row, its rows of `stages` (in order) and its child runs' rows."""
    request: StoredRequest | None = _maybe(_request, row["request"])
    messages = None if request is None else request.messages
    end = run_end(row["record"])
    if end is not None:
        intermediate, answer, from_stages = end.intermediate, end.answer, end.from_stages
        outputs = {s.index: s.output for s in end.stages}
    else:
        intermediate = _maybe(_intermediate, row["intermediate"]) or {}
        answer = _maybe(_answer, row["answer"])
        from_stages = _maybe(_from_stages, row["from_stages"])
        outputs = {s["idx"]: s["output"] for s in stage_rows}
    if from_stages is not None:  # texts kept once, in their stage
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
        stages=stored_stages(stage_rows, messages, end),
        children=[summary(child) for child in child_rows],
    )


def stored_stages(
    stage_rows: Sequence[Mapping[Any, Any]], client_messages: list[Any] | None, end: RunEnd | None, first: int = 0
) -> list[StoredStage]:
    """A run's stages from `first` on, in order: its rows of `stages` and those its end holds (`end`), each that
    sent the client's own messages with `client_messages` (its run's request messages)."""
    found = [stage(row, client_messages) for row in stage_rows if row["idx"] >= first]
    if end is not None and end.stages:
        own = set(end.request_messages)
        for kept in end.stages:
            if kept.index >= first:
                if kept.index in own:
                    kept.messages = client_messages
                found.append(kept)
        found.sort(key=lambda s: s.index)
    return found


def run_end(record_json: str | None) -> RunEnd | None:
    """A run's `record` column, decoded (None while it is going, and for a run that ended before version 4)."""
    return None if record_json is None else _end.decode(record_json)


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
        cost=None if row["cost_currency"] is None else StageCost(row["cost_currency"], row["cost"]),
        child_run_id=row["child_run_id"],
    )
