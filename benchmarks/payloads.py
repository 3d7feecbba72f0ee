"""The bytes every benchmark sends and answers with: client requests of three sizes, the mock upstream's
pre-encoded completions and event streams (in bursts, and token by token), and a 50 KB draft with its SEARCH/REPLACE
review."""

from __future__ import annotations

import json
from typing import Any

# Upstream model names the product config and the floors forward to; the mock answers by them.
API_MODEL = "bench-api"
ADAPTER_MODEL = "bench-adapter"
CRITIC_MODEL = "bench-critic"

_SENTENCE = "The quick brown fox jumps over the lazy dog while the engineer measures what every request costs. "
ANSWER = (
    "Here is a short answer. The proxy forwards the request, reads the completion and returns it. "
    "Overhead is what the proxy adds on top of the upstream: parsing, routing, encoding and the HTTP client. "
    "Measure it as CPU time per request on a pinned core, since wall-clock latency on a shared machine drifts."
)
USAGE = {"prompt_tokens": 412, "completion_tokens": 87, "total_tokens": 499}


def request(model: str, size: str = "1.5k", *, stream: bool = False) -> dict[str, Any]:
    """A chat-completions request: `small` (~90 B), `1.5k` (~1.5 KB) or `200k` (~200 KB with 64 tools)."""
    body: dict[str, Any]
    if size == "small":
        body = {"model": model, "messages": [{"role": "user", "content": "Say hello in five words."}]}
    elif size == "1.5k":
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": "You are a concise assistant. " + _SENTENCE * 5},
                {"role": "user", "content": "Summarise the following. " + _SENTENCE * 8},
            ],
            "temperature": 0.2,
            "max_tokens": 256,
            "user": "bench-user-0001",
        }
    elif size == "200k":
        body = {
            "model": model,
            "messages": _conversation(135),
            "tools": [_tool(i) for i in range(64)],
            "tool_choice": "auto",
            "temperature": 0.2,
            "parallel_tool_calls": True,
        }
    else:
        raise ValueError(f"unknown payload size {size!r}")
    if stream:
        body["stream"] = True
    return body


def request_bytes(model: str, size: str = "1.5k", *, stream: bool = False) -> bytes:
    # Spaces after separators, as the OpenAI SDKs send them.
    return json.dumps(request(model, size, stream=stream)).encode()


def _conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent with tools. " + _SENTENCE * 20}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Step {i}: " + _SENTENCE * 4})
        if i % 3 == 2:
            call = {"id": f"call_{i}", "type": "function", "function": {"name": f"tool_{i % 64}", "arguments": "{}"}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": _SENTENCE * 2})
        else:
            messages.append({"role": "assistant", "content": _SENTENCE * 3})
    return messages


def _tool(i: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Tool number {i}. " + _SENTENCE * 6,
            "parameters": {
                "type": "object",
                "properties": {
                    name: {"type": "string", "description": f"The {name} argument. " + _SENTENCE}
                    for name in ("path", "query", "mode", "limit")
                },
                "required": ["path", "query"],
            },
        },
    }


# -- the mock upstream's answers ------------------------------------------------------------------

# The adapter model answers with one edit to the draft; the critic with a critique.
ADAPTER_REPLY = "<<<<<<< SEARCH\nHere is a short answer.\n=======\nHere is a short, reviewed answer.\n>>>>>>> REPLACE"
CRITIC_REPLY = "The answer is correct but could name the three costs more precisely. Keep it short."


def completion(model: str, content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "system_fingerprint": "fp_mock",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    ).encode()


def sse_events(model: str, content: str, pieces: int = 18) -> list[bytes]:
    """An OpenAI-style event stream of ~20 events: role, content pieces, finish, usage, `[DONE]`."""
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
    size = -(-len(content) // pieces)
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": content[i : i + size]} for i in range(0, len(content), size)]
    events = [
        {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]} for delta in deltas
    ]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]})
    events.append({**base, "choices": [], "usage": USAGE})
    return [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]


PACED_TOKEN = " word"


def paced_events(chunks: int, model: str = API_MODEL) -> list[bytes]:
    """The event stream a model sends token by token: the role chunk, `chunks` chunks of one token
    (`PACED_TOKEN`), the finish chunk, the usage chunk and `[DONE]` (the mock writes each on its own, 1 ms apart)."""
    base = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_mock",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

    token = chunk({"content": PACED_TOKEN})
    usage = b"data: " + json.dumps({**base, "choices": [], "usage": USAGE}).encode() + b"\n\n"
    return [
        chunk({"role": "assistant", "content": ""}),
        *[token] * chunks,
        chunk({}, "stop"),
        usage,
        b"data: [DONE]\n\n",
    ]


# -- SEARCH/REPLACE on a 50 KB draft --------------------------------------------------------------


def draft_and_review(size: int = 50_000, edits: int = 8) -> tuple[str, str, str]:
    """A draft of about `size` characters, a reply with `edits` blocks spread over it, and the expected result."""
    lines = [f"{i:04d}. " + _SENTENCE.strip() for i in range(size // len(_SENTENCE) + 1)]
    draft = "\n".join(lines) + "\n"
    step = len(lines) // edits
    blocks = []
    expected = list(lines)
    for n in range(edits):
        i = n * step + step // 2
        # Every other block needs the line match: its SEARCH line has trailing spaces the draft lacks.
        search = lines[i] + "   " if n % 2 else lines[i]
        replace = f"{i:04d}. Edited line {n}."
        blocks.append(f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE")
        expected[i] = replace
    reply = "I made these changes:\n\n" + "\n\n".join(blocks) + "\n"
    return draft, reply, "\n".join(expected) + "\n"
