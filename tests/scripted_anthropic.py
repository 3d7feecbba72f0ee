"""The scripted upstream's Anthropic Messages endpoint (`POST …/messages`): a scripted `Reply` answered in the
Messages shape, plain or as Anthropic's event stream, as the API records show them.

`Reply.content` is the text block, `tool_calls` (OpenAI form) become `tool_use` blocks, `finish_reason` the
`stop_reason` (`stop` → `end_turn`, `length` → `max_tokens`, `tool_calls` → `tool_use`; any other value as given;
`stop` with vLLM's `choice_extra={"stop_reason": "<the sequence>"}` → `stop_sequence`, with `stop_sequence` set),
`anthropic_usage` the usage (default: 10 in, 5 out). `body` with `status` answers a raw error envelope.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 5}


def message(reply: Any, model: str) -> dict[str, Any]:
    """The `message` a scripted reply stands for."""
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls or ():
        arguments = json.loads(call["function"].get("arguments") or "{}")
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": arguments})
    sequence = (reply.choice_extra or {}).get("stop_reason") if reply.finish_reason == "stop" else None
    stopped = isinstance(sequence, str)
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "stop_sequence" if stopped else STOP.get(reply.finish_reason, reply.finish_reason),
        "stop_sequence": sequence if stopped else None,
        "usage": dict(reply.anthropic_usage or DEFAULT_USAGE),
    }


def event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


async def events(answer: dict[str, Any], *, error: dict[str, Any] | None = None) -> AsyncIterator[str]:
    """The event stream of `answer`, as the API sends it (text in pieces, tool input as partial JSON); `error`
    ends it with an `error` event after the first block instead."""
    usage = dict(answer["usage"])
    start_usage = {**usage, "output_tokens": 1}
    yield event("message_start", {"message": {**answer, "content": [], "stop_reason": None, "usage": start_usage}})
    yield event("ping", {})
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            text = block["text"]
            for start in range(0, len(text), 8):
                delta = {"type": "text_delta", "text": text[start : start + 8]}
                yield event("content_block_delta", {"index": index, "delta": delta})
        else:
            started = {**block, "input": {}}
            yield event("content_block_start", {"index": index, "content_block": started})
            partial = json.dumps(block["input"])
            for start in range(0, len(partial), 5):
                delta = {"type": "input_json_delta", "partial_json": partial[start : start + 5]}
                yield event("content_block_delta", {"index": index, "delta": delta})
        yield event("content_block_stop", {"index": index})
        if error is not None:
            yield event("error", {"error": error})
            return
    delta = {"stop_reason": answer["stop_reason"], "stop_sequence": answer["stop_sequence"]}
    yield event("message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
    yield event("message_stop", {})
