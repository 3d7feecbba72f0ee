"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A run's answer in the Anthropic Messages shape (the inbound side's rendering): the `message`, the event
stream, and the error envelope.

- the answer's text is a `text` block, its tool calls `tool_use` blocks (arguments parsed into `input`);
- `finish_reason` → `stop_reason`: `stop` → `end_turn`, `length` → `max_tokens`, `tool_calls` → `tool_use`,
  `content_filter` → `refusal`; `stop` with the stop sequence that ended the answer (the choice's `stop_reason`
  as vLLM and the demo model send it) → `stop_sequence`, with `stop_sequence` set;
- usage is the run's total: `input_tokens` without the cached ones, which are `cache_read_input_tokens`
  (and `cache_creation_input_tokens` where an Anthropic stage reported cache writes);
- the `adapter_critic` extension is an extra field of the `message`, and of the stream's `message_delta`.

The stream is Anthropic's event sequence — `message_start`, per block `content_block_start`,
`content_block_delta`…, `content_block_stop`, then `message_delta` and `message_stop` — with `ping` events as
keep-alives (and, for clients that asked, as stage progress). An error after the first byte is an `error` event.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from ...core import Answer, Usage
from ...errors import APIError, Rendered, UpstreamError, render_error
from ...errorwire import read_error_body
from ...events import RunRecord, extension
from ...ids import new_id
from ..base import Redact
from ..openai.chunks import FunctionDelta, ToolCallDelta, chunk_decoder, tool_calls
from . import wire

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
PING = b'event: ping\ndata: {"type":"ping"}\n\n'

_encoder = msgspec.json.Encoder()


def new_message_id() -> str:
    return new_id("msg_")


def stop_reason(finish_reason: str | None) -> str:
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def stopped(answer: Answer, finish: bytes | None = None) -> dict[str, str | None]:
    """`stop_reason` and `stop_sequence` for an answer; `finish` is its stream's finish chunk, when it was relayed
    (else the completion it came from says which stop sequence ended it)."""
    sequence = _stop_sequence(finish or answer.source) if answer.finish_reason == "stop" else None
    if sequence is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": sequence}
    return {"stop_reason": stop_reason(answer.finish_reason), "stop_sequence": None}


class _StopChoice(msgspec.Struct):
    stop_reason: Any = None  # vLLM's: the stop string that ended the answer (a number: a stop token)


class _Stopped(msgspec.Struct):
    choices: list[_StopChoice] = []


_stopped_decoder = msgspec.json.Decoder(_Stopped)


def _stop_sequence(body: bytes | None) -> str | None:
    if not body or b'"stop_reason"' not in body:
        return None
    try:
        choices = _stopped_decoder.decode(body).choices
    except msgspec.DecodeError:
        return None
    sequence = choices[0].stop_reason if choices else None
    return sequence if isinstance(sequence, str) else None


def usage(total: Usage) -> dict[str, int]:
    """The run's total usage as Messages usage."""
    details = total.prompt_tokens_details if isinstance(total.prompt_tokens_details, dict) else {}
    cached = _count(details.get("cached_tokens"))
    written = _count(details.get("cache_creation_tokens"))
    fields = {"input_tokens": max(0, total.prompt_tokens - cached - written), "output_tokens": total.completion_tokens}
    if cached:
        fields["cache_read_input_tokens"] = cached
    if written:
        fields["cache_creation_input_tokens"] = written
    return fields


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def message(record: RunRecord, *, response_id: str) -> bytes:
    """A finished run as a Messages `message`, with the `adapter_critic` extension."""
    ext = extension(record)
    answer = record.answer
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.content}] if answer.content else []
    content += [_tool_use(call) for call in answer.tool_calls or ()]
    return _encoder.encode(
        {
            "id": response_id,
            "type": "message",
            "role": "assistant",
            "model": record.served_model,
            "content": content,
            **stopped(answer),
            "usage": usage(ext.tokens.total),
            "adapter_critic": ext,
        }
    )


def _tool_use(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    return {
        "type": "tool_use",
        "id": call.get("id") or f"toolu_{os.urandom(12).hex()}",
        "name": function.get("name") or "",
        "input": _input(function.get("arguments")),
    }


def _input(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments:
        return {}
    try:
        parsed = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def sse(kind: str, payload: dict[str, Any]) -> bytes:
    """One event as Anthropic sends it: its type as the `event:` line too (the SDKs read it)."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode({"type": kind, **payload}) + b"\n\n"


def render_messages_error(error: APIError, redact: Redact | None = None) -> Rendered:
    """Any error as `{"type": "error", "error": {"type", "message"}}` with the status and headers any
    protocol answers it with (`errors.presentation`).

    A relayed upstream error keeps its own message (and its type, when the upstream spoke Messages)."""
    rendered = render_error(error, redact)
    message = error.message if redact is None else redact(error.message)
    kind = wire.error_type(rendered.status)
    if isinstance(error, UpstreamError) and error.relays_body:
        parsed = read_error_body(rendered.body)
        relayed = parsed.error if parsed is not None else None
        if relayed is not None and relayed.message:
            message = relayed.message
            if relayed.type is not None and relayed.type in wire.ERROR_TYPES.values():
                kind = relayed.type
    envelope = wire.ErrorEnvelope(wire.ErrorDetail(type=kind, message=message))
    return Rendered(rendered.status, rendered.headers, _encoder.encode(envelope))


class MessagesStream:
    """One streamed response as Messages events (the Anthropic protocol's `StreamRenderer`).

    OpenAI chunks of the final call come in (`relayed`); the blocks they open and close go out. State: whether
    `message_start` went out, the open block (its index and kind), and which tool call is which block."""

    keepalive = PING

    def __init__(self, *, response_id: str, served_model: str) -> None:
        self.response_id, self.served_model = response_id, served_model
        self._started = False
        self._blocks = 0  # blocks opened so far (the next one's index)
        self._open: str | None = None  # "text" or "tool_use"
        self._tools: dict[int, int] = {}  # tool call index -> block index
        self._known: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}  # `message_start`'s usage

    def begin(self, known: Usage) -> None:
        """The usage known before the answer's first event: `message_start` carries it (the totals come with
        `message_delta`)."""
        self._known = usage(known)

    def relayed(self, payloads: list[bytes]) -> bytes:
        out = [self._start()]
        for payload in payloads:
            try:
                chunk = chunk_decoder.decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # the relay already refused a payload it could not read
            for choice in chunk.choices:
                if choice.index != 0 or choice.delta is None:
                    continue
                if choice.delta.content:
                    out.append(self._text(choice.delta.content))
                if choice.delta.tool_calls:
                    out += [self._tool_delta(call) for call in tool_calls(choice.delta)]
        return b"".join(out)

    def answer(self, answer: Answer) -> bytes:
        out = [self._start()]
        if answer.content:
            out.append(self._text(answer.content))
        for position, call in enumerate(answer.tool_calls or ()):
            block = _tool_use(call)
            out.append(self._open_block("tool_use", {**block, "input": {}}))
            self._tools[position] = self._blocks - 1
            out.append(self._json_delta(_encoder.encode(block["input"]).decode()))
        return b"".join(out)

    def tail(self, record: RunRecord, finish: bytes | None) -> bytes:
        ext = extension(record)
        delta = stopped(record.answer, finish)
        return b"".join(
            [
                self._start(),
                self._close_block(),
                sse("message_delta", {"delta": delta, "usage": usage(ext.tokens.total), "adapter_critic": ext}),
                sse("message_stop", {}),
            ]
        )

    def progress(self, stage: str, ok: bool, elapsed_ms: float) -> bytes:
        progress = {"stage": stage, "status": "ok" if ok else "failed", "ms": elapsed_ms}
        return sse("ping", {"adapter_critic": {"progress": progress}})

    def error_event(self, rendered: Rendered) -> bytes:
        return b"event: error\ndata: " + rendered.body + b"\n\n"

    # -- blocks ------------------------------------------------------------------------------------
    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": self.response_id,
            "type": "message",
            "role": "assistant",
            "model": self.served_model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._known,
        }
        return sse("message_start", {"message": message})

    def _text(self, text: str) -> bytes:
        opened = b"" if self._open == "text" else self._open_block("text", {"type": "text", "text": ""})
        delta = {"index": self._blocks - 1, "delta": {"type": "text_delta", "text": text}}
        return opened + sse("content_block_delta", delta)

    def _tool_delta(self, call: ToolCallDelta) -> bytes:
        out = b""
        if call.index not in self._tools or call.id:
            function = call.function or FunctionDelta()
            block = {"type": "tool_use", "id": call.id or f"toolu_{os.urandom(12).hex()}", "name": function.name or ""}
            out = self._open_block("tool_use", {**block, "input": {}})
            self._tools[call.index] = self._blocks - 1
        arguments = call.function.arguments if call.function is not None else None
        if arguments and self._tools[call.index] == self._blocks - 1:
            out += self._json_delta(arguments)
        return out

    def _json_delta(self, partial: str) -> bytes:
        delta = {"index": self._blocks - 1, "delta": {"type": "input_json_delta", "partial_json": partial}}
        return sse("content_block_delta", delta)

    def _open_block(self, kind: str, block: dict[str, Any]) -> bytes:
        closed = self._close_block()
        self._open = kind
        self._blocks += 1
        return closed + sse("content_block_start", {"index": self._blocks - 1, "content_block": block})

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse("content_block_stop", {"index": self._blocks - 1})
