"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The store's records as the server sends them to its writer process (`writerprocess`, `writer`): compact msgpack,
one frame per batch, and the records rebuilt on the other side as `recorder`'s, so that the rows are made there by
the same code (`writes.building`).

A record is encoded on its own when it is queued (`encode`), on the request's task: a few µs for a direct run's
three records, nothing left to do for the batch but to join the encoded records (`frame`). What is sent is what the
rows need, as cheaply as the server can give it: a stage's `StageFinished` as it is when none of its attempts
failed (msgpack encodes a Struct in C), the request's messages and options as the JSON bytes they already are, an
error as the client got it (`rows.error_fields`). Values that may hold JSON kept raw (`msgspec.Raw`: tool calls,
`intermediate`, a cached answer) go as JSON text, which msgpack cannot mistake for its own.

A frame is its header's length and its body's (`HEAD`), the header (`Head`: its sequence number, the store's
instance, the batch's secrets — keys may rotate — and how urgent it is) and the body: a msgpack
array of the encoded records. The writer answers each frame with an `Ack`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, cast

import msgspec

from ..core import Usage
from ..errors import APIError, UpstreamError
from ..events import Cost, StageFinished
from ..pricing import CallCost
from .recorder import CachePut, FeedbackGiven, Record, RunClosed, RunOpened, StageDone
from .records import Capture, StoredError
from .rows import error_fields, stage_of

HEAD = struct.Struct("<II")  # a frame's header and body lengths
_json = msgspec.json.Encoder()
_encoder = msgspec.msgpack.Encoder()


class Head(msgspec.Struct, array_like=True):
    seq: int
    instance: str
    secrets: list[str]
    urgent: bool = False  # a big batch, or the store's queue backing up (`writes.urgent`): written in one go
    behind: bool = False  # the store's queue is backing up (`writes.URGENT_BACKLOG`): written at the server's priority


class Ack(msgspec.Struct, array_like=True):
    """The writer's answer to frame `seq`: its records written, or the reason they were not."""

    seq: int
    error: str | None = None


class WireError(msgspec.Struct, array_like=True):
    """An attempt's `UpstreamError`, as much of it as the store keeps (its message is made from these)."""

    stage: str
    target: str
    kind: str
    detail: str
    upstream_status: int | None = None


class WireAttempt(msgspec.Struct):
    target: str
    error: WireError | None = None


class WireFinished(msgspec.Struct):
    """`events.StageFinished` by its field names: the struct itself is sent when it holds no error."""

    stage: str
    target: str
    attempts: list[WireAttempt]
    usage: Usage
    elapsed_ms: float
    output: str | None = None
    error: WireError | None = None
    reported: bool = True
    finish_reason: str | None = None
    cost: CallCost | None = None
    child: str | None = None


class WireOpened(msgspec.Struct, array_like=True, tag=1):
    run_id: str
    request_id: str
    served_model: str
    mode: str
    stream: bool
    started_at: float
    capture: Capture
    options: bytes  # the request's options as stored (JSON object: `stream`, the overrides, the rest)
    messages: bytes | None  # JSON array; None under capture `metadata`
    secret: str | None
    key_name: str | None
    parent_run_id: str | None
    parent_stage: str | None
    cached_from: str | None


class WireStage(msgspec.Struct, array_like=True, tag=2):
    run_id: str
    index: int
    finished: WireFinished
    started_offset_ms: float
    messages: bytes | None  # JSON
    capture: Capture
    secret: str | None
    request_messages: bool


class WireClosed(msgspec.Struct, array_like=True, tag=3):
    run_id: str
    status: str
    finished_at: float
    duration_ms: float
    usage: Usage
    error: StoredError | None  # its message not masked yet
    intermediate: bytes | None  # JSON object; None when empty
    content: str | None
    tool_calls: bytes | None  # JSON array
    finish_reason: str | None
    capture: Capture
    secret: str | None
    cost: Cost | None
    # Texts that are a stage's output sent in the same frame (`encode`'s `outputs`): that stage's index, the text
    # itself not sent again (`content` None; the value in `intermediate` null).
    content_stage: int | None = None
    intermediate_stages: dict[str, int] | None = None


class WireCachePut(msgspec.Struct, array_like=True, tag=4):
    key: str
    run_id: str
    served_model: str
    entry: bytes  # JSON
    created_at: float
    expires_at: float
    secret: str | None


class WireFeedback(msgspec.Struct, array_like=True, tag=5):
    given: FeedbackGiven  # sent as it is: every field of it is plain data


Wire = WireOpened | WireStage | WireClosed | WireCachePut | WireFeedback
head_decoder = msgspec.msgpack.Decoder(Head)
body_decoder = msgspec.msgpack.Decoder(list[Wire])
ack_decoder = msgspec.msgpack.Decoder(Ack)


# -- the server's side ---------------------------------------------------------------------------------------------


def encode(record: Record, outputs: Sequence[tuple[int, str]] = ()) -> bytes:
    """`record` as the writer process takes it (msgpack). Raises `TypeError` for a value msgpack cannot hold.

    `outputs`: for a `RunClosed`, the outputs (stage index, text) of the run's stages whose records go in the same
    frame before it. A text of its answer or of `intermediate` that is one of them (a direct run's answer, its final
    note) is sent as that stage's index, not again: a big answer crosses the pipe once."""
    kind = type(record)
    wire: Any
    if kind is StageDone:
        done = cast(StageDone, record)
        finished: Any = done.finished
        failed = finished.error is not None
        for attempt in finished.attempts:
            failed = failed or attempt.error is not None
        if failed:
            finished = _finished(finished)
        messages = None if done.messages is None else _json.encode(done.messages)
        wire = WireStage(
            done.run_id,
            done.index,
            finished,
            done.started_offset_ms,
            messages,
            done.capture,
            done.secret,
            done.request_messages,
        )
    elif kind is RunOpened:
        opened = cast(RunOpened, record)
        request = opened.request
        options: dict[str, Any] = dict(request.options)
        if request.stream:
            options["stream"] = True
        if request.overrides is not None:
            options[request.overrides_param] = request.overrides.given
        full = opened.capture == "full"
        wire = WireOpened(
            opened.run_id,
            opened.request_id,
            opened.served_model,
            opened.mode,
            opened.stream,
            opened.started_at,
            opened.capture,
            _json.encode(options),
            bytes(request.messages_json) if full else None,
            opened.secret,
            opened.key_name,
            opened.parent_run_id,
            opened.parent_stage,
            opened.cached_from,
        )
    elif kind is RunClosed:
        closed = cast(RunClosed, record)
        answer = closed.answer
        content, content_stage = answer.content, stage_of(answer.content, outputs)
        if content_stage is not None:
            content = None
        intermediate, intermediate_stages = closed.intermediate, None
        if outputs and intermediate:
            for key, value in intermediate.items():
                index = stage_of(value, outputs)
                if index is not None:
                    intermediate_stages = intermediate_stages or {}
                    intermediate_stages[key] = index
            if intermediate_stages:
                intermediate = {k: None if k in intermediate_stages else v for k, v in intermediate.items()}
        wire = WireClosed(
            closed.run_id,
            closed.status,
            closed.finished_at,
            closed.duration_ms,
            closed.usage,
            _error_fields(closed.error),
            _json.encode(intermediate) if intermediate else None,
            content,
            None if answer.tool_calls is None else _json.encode(answer.tool_calls),
            answer.finish_reason,
            closed.capture,
            closed.secret,
            closed.cost,
            content_stage,
            intermediate_stages,
        )
    elif kind is CachePut:
        put = cast(CachePut, record)
        entry = _json.encode(put.entry)
        wire = WireCachePut(put.key, put.run_id, put.served_model, entry, put.created_at, put.expires_at, put.secret)
    else:
        wire = WireFeedback(cast(FeedbackGiven, record))
    return _encoder.encode(wire)


def _error_fields(error: APIError | StoredError | None) -> StoredError | None:
    return error if error is None or isinstance(error, StoredError) else error_fields(error)


def _error(error: UpstreamError | None) -> WireError | None:
    if error is None:
        return None
    return WireError(error.stage, error.target, error.kind, error.detail, error.upstream_status)


def _finished(finished: StageFinished) -> WireFinished:
    attempts = [WireAttempt(a.target, _error(a.error)) for a in finished.attempts]
    return WireFinished(
        finished.stage,
        finished.target,
        attempts,
        finished.usage,
        finished.elapsed_ms,
        finished.output,
        _error(finished.error),
        finished.reported,
        finished.finish_reason,
        finished.cost,
        finished.child,
    )


def frame_head(
    seq: int,
    instance: str,
    secrets: Sequence[str],
    records: Sequence[bytes],
    urgent: bool = False,
    behind: bool = False,
) -> bytes:
    """What a batch's frame begins with: the lengths (`HEAD`), its header, and the msgpack array header of its
    records (each `encode`d), which follow it as they are."""
    head = _encoder.encode(Head(seq, instance, list(secrets), urgent, behind))
    count = len(records)
    if count < 16:
        array = bytes((0x90 | count,))
    elif count < 0x10000:
        array = b"\xdc" + count.to_bytes(2, "big")
    else:
        array = b"\xdd" + count.to_bytes(4, "big")
    return HEAD.pack(len(head), len(array) + sum(map(len, records))) + head + array


def frame(seq: int, instance: str, secrets: Sequence[str], records: Sequence[bytes], urgent: bool = False) -> bytes:
    """One batch's frame, whole: `frame_head` and its records."""
    return frame_head(seq, instance, secrets, records, urgent) + b"".join(records)


def url_frame(url: str, nice: int) -> bytes:
    """The first frame the writer reads: the store's URL (not on its command line, where `ps` shows it) and how much
    to lower its priority (`sqlitefile.WRITER_NICE`)."""
    data = url.encode("utf-8")
    return HEAD.pack(len(data), nice) + data


def ack_frame(ack: Ack) -> bytes:
    """An `Ack` as the writer sends it: its length (`HEAD`, the second field 0) and itself."""
    body = _encoder.encode(ack)
    return HEAD.pack(len(body), 0) + body
