"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

An upstream that ignores `"stream": true` and answers one JSON `chat.completion` (many small model servers
do): its answer as the `chat.completion.chunk` payloads it would have streamed.

Per choice: a role chunk; a chunk with the content and every other message field (`refusal`, reasoning…) and
the choice's `logprobs`; the tool calls with their `index`; the finish chunk. Then a usage chunk when the
completion has usage.
"""

from __future__ import annotations

from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()


def completion_as_chunks(content: bytes) -> list[bytes] | None:
    """The chunk payloads of a JSON completion; None when `content` is not a chat completion."""
    try:
        completion = msgspec.json.decode(content)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices or not all(_is_choice(c) for c in choices):
        return None
    head = {key: completion[key] for key in ("id", "created", "model", "system_fingerprint") if key in completion}
    head["object"] = "chat.completion.chunk"
    payloads: list[bytes] = []

    def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> None:
        choice = {"index": index, "delta": delta, **extra, "finish_reason": finish_reason}
        payloads.append(_encoder.encode({**head, "choices": [choice]}))

    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        message = dict(choice["message"])
        message.pop("role", None)
        tool_calls = message.pop("tool_calls", None)
        chunk(index, {"role": "assistant", "content": ""})
        if any(value is not None for value in message.values()) or choice.get("logprobs") is not None:
            extra = {"logprobs": choice["logprobs"]} if choice.get("logprobs") is not None else {}
            chunk(index, message, **extra)
        if isinstance(tool_calls, list) and tool_calls:
            calls = [{"index": i, **call} if isinstance(call, dict) else call for i, call in enumerate(tool_calls)]
            chunk(index, {"tool_calls": calls})
        chunk(index, {}, choice.get("finish_reason") or "stop")
    if isinstance(completion.get("usage"), dict):
        payloads.append(_encoder.encode({**head, "choices": [], "usage": completion["usage"]}))
    return payloads


def _is_choice(choice: Any) -> bool:
    return isinstance(choice, dict) and isinstance(choice.get("message"), dict)
