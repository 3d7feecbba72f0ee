"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

An Anthropic target's answers read back as OpenAI (the upstream side): a `message` as a `chat.completion`,
and a stream of Messages events as `chat.completion.chunk` payloads.

- `text` blocks are the content, `tool_use` blocks `tool_calls` with JSON-string arguments, `thinking`
  blocks the message's `reasoning_content` (never part of the answer);
- `stop_reason`: `end_turn`, `stop_sequence` and `pause_turn` → `stop`, `max_tokens` → `length`, `tool_use` →
  `tool_calls`, `refusal` → `content_filter`; the `stop_sequence` that ended it is the choice's `stop_reason`, as
  vLLM says it (so an Anthropic client of this server gets it back: `render.stopped`);
- usage: `prompt_tokens` is every input token (`input_tokens` plus cache reads and cache writes), with
  `prompt_tokens_details.cached_tokens` (reads) and `cache_creation_tokens` (writes); `completion_tokens` is
  `output_tokens`.

Streamed: `message_start` is the role chunk (and a usage chunk with its input tokens, known from the start),
`content_block_start` of a `tool_use` the tool call's id and name, `content_block_delta` the text, the arguments
(`input_json_delta`) or the reasoning; `message_delta` the finish chunk and then a usage chunk (the whole usage);
`message_stop` ends the answer; `ping` is nothing; an `error` event becomes an `{"error": {...}}` payload (the
relay ends the call with it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ...errors import StreamIncomplete
from . import wire

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(wire.Message)
_event_decoder = msgspec.json.Decoder(wire.StreamEvent)


def finish_reason(stop_reason: str | None) -> str:
    return FINISH_REASONS.get(stop_reason or "end_turn", "stop")


def usage(given: wire.Usage | None, output: wire.Usage | None = None) -> dict[str, Any]:
    """OpenAI usage from a Messages `usage` (and, streamed, the later `message_delta` usage, which wins)."""
    fields = msgspec.structs.asdict(given) if given is not None else {}
    if output is not None:
        fields.update((key, value) for key, value in msgspec.structs.asdict(output).items() if value is not None)
    cache_read = fields.get("cache_read_input_tokens") or 0
    cache_write = fields.get("cache_creation_input_tokens") or 0
    prompt = (fields.get("input_tokens") or 0) + cache_read + cache_write
    completion = fields.get("output_tokens") or 0
    result: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    details = {}
    if fields.get("cache_read_input_tokens") is not None:
        details["cached_tokens"] = cache_read
    if fields.get("cache_creation_input_tokens") is not None:
        details["cache_creation_tokens"] = cache_write
    if details:
        result["prompt_tokens_details"] = details
    return result


def completion(content: bytes) -> bytes | None:
    """A Messages answer as an OpenAI `chat.completion` body; None when `content` is not one."""
    try:
        message = _message_decoder.decode(content)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if message.type != "message":
        return None
    texts = [block.text for block in message.content if block.type == "text" and block.text is not None]
    calls = [_tool_call(block) for block in message.content if block.type == "tool_use"]
    thoughts = [block.thinking for block in message.content if block.type == "thinking" and block.thinking]
    answer: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        answer["tool_calls"] = calls
    if thoughts:
        answer["reasoning_content"] = "".join(thoughts)
    return _encoder.encode(
        {
            "id": message.id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": message.model,
            "choices": [{"index": 0, "message": answer, **_finish(message.stop_reason, message.stop_sequence)}],
            "usage": usage(message.usage),
        }
    )


def _finish(stop_reason: str | None, stop_sequence: str | None) -> dict[str, Any]:
    """A choice's `finish_reason`, and the stop sequence that ended it as vLLM's `stop_reason`."""
    finish: dict[str, Any] = {"finish_reason": finish_reason(stop_reason)}
    if stop_reason == "stop_sequence" and stop_sequence is not None:
        finish["stop_reason"] = stop_sequence
    return finish


def _tool_call(block: wire.ContentBlock) -> dict[str, Any]:
    arguments = _encoder.encode(block.input if block.input is not None else {}).decode()
    return {"id": block.id or "", "type": "function", "function": {"name": block.name or "", "arguments": arguments}}


class StreamTranslator:
    """One streamed answer's Messages events as `chat.completion.chunk` payloads (it keeps the ids, the tool
    calls' positions and the input usage of `message_start` for the final usage chunk)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {"id": "", "object": "chat.completion.chunk", "created": int(time.time())}
        self.head["model"] = ""
        self.input: wire.Usage | None = None
        self.tools: dict[int, int] = {}  # content block index -> tool call index
        self.done = False

    def payloads(self, data: bytes) -> list[bytes]:
        """The chunk payloads of one event's `data` (none for most events but deltas)."""
        try:
            event = _event_decoder.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return [data]  # not a Messages event: the relay says the upstream sent something it cannot read
        kind = event.type
        if kind == "message_start" and event.message is not None:
            self.head["id"], self.head["model"] = event.message.id, event.message.model
            self.input = event.message.usage
            role = self._chunk({"role": "assistant", "content": ""})
            if self.input is None or self.input.input_tokens is None:
                return [role]
            # The input tokens, known from the start: a usage chunk of its own (the relay counts it, and
            # `message_delta`'s usage chunk replaces it at the end).
            return [role, _encoder.encode({**self.head, "choices": [], "usage": usage(self.input)})]
        if kind == "content_block_start" and event.content_block is not None and event.index is not None:
            block = event.content_block
            if block.type == "tool_use":
                position = self.tools[event.index] = len(self.tools)
                call = {"index": position, "id": block.id or "", "type": "function"}
                call["function"] = {"name": block.name or "", "arguments": ""}
                return [self._chunk({"tool_calls": [call]})]
            if block.type == "text" and block.text:
                return [self._chunk({"content": block.text})]
            return []
        if kind == "content_block_delta" and event.delta is not None:
            return self._delta(event.index, event.delta)
        if kind == "message_delta":
            delta = event.delta or wire.Delta()
            finish = self._chunk({}, **_finish(delta.stop_reason, delta.stop_sequence))
            return [finish, _encoder.encode({**self.head, "choices": [], "usage": usage(self.input, event.usage)})]
        if kind == "message_stop":
            self.done = True
            return []
        if kind == "error":
            self.done = True  # the API ends the stream after it
            detail = event.error or wire.ErrorDetail()
            said = f"{detail.type}: {detail.message}" if detail.type else detail.message or "no message"
            return [_encoder.encode({"error": {"message": said, "type": detail.type}})]
        return []  # ping, content_block_stop, and event types of newer API versions

    def _delta(self, index: int | None, delta: wire.Delta) -> list[bytes]:
        if delta.type == "text_delta" and delta.text:
            return [self._chunk({"content": delta.text})]
        if delta.type == "input_json_delta" and delta.partial_json and index in self.tools:
            call = {"index": self.tools[index], "function": {"arguments": delta.partial_json}}
            return [self._chunk({"tool_calls": [call]})]
        if delta.type == "thinking_delta" and delta.thinking:
            return [self._chunk({"reasoning_content": delta.thinking})]
        return []

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **choice: Any) -> bytes:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason, **choice}]
        return _encoder.encode({**self.head, "choices": choices})


async def chunks(batches: AsyncIterator[list[bytes]]) -> AsyncIterator[list[bytes]]:
    """A Messages event stream (its `data` payloads, per read) as chunk payloads, up to `message_stop`.

    The stream has no `[DONE]`: the reader's `StreamIncomplete` at its end is the end, if `message_stop` came;
    a stream that ends before it was cut short."""
    translator = StreamTranslator()
    try:
        async for batch in batches:
            out: list[bytes] = []
            for data in batch:
                out += translator.payloads(data)
                if translator.done:
                    break
            if out:
                yield out
            if translator.done:
                return
    except StreamIncomplete:
        if not translator.done:
            raise
