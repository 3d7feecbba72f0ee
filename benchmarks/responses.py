"""What the Responses API costs over chat completions, in one process (`python -m benchmarks.responses [--quick]`).

The same conversation sent both ways (the benchmark's small, 1.5 KB and 200 KB-with-64-tools chat requests, and
their Responses form: the system message as `instructions`, tool calls and results as `function_call` /
`function_call_output` items, tools flat):

- request: the chat decoder (`decode_request`) against the Responses inbound side (map onto a chat body, decode it);
- answer: a finished run as a `chat.completion` against a `response` object;
- stream: rendering 20 upstream chunks as `chat.completion.chunk` events against Responses events, tail included.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from adapter_critic.core import Answer, Usage
from adapter_critic.events import RunRecord, StageRecord
from adapter_critic.protocols.openai.chunks import ChunkWriter
from adapter_critic.protocols.openai.render import completion
from adapter_critic.protocols.responses import outbound
from adapter_critic.protocols.responses.inbound import Echo
from adapter_critic.protocols.responses.protocol import INBOUND
from adapter_critic.protocols.responses.stream import ResponsesEvents
from adapter_critic.request.decode import decode_request

from . import micro, payloads
from .micro import SIZES, time_per_call


def responses_request(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions request in the Responses API's form."""
    items: list[dict[str, Any]] = []
    instructions = None
    for message in chat["messages"]:
        role = message["role"]
        if role == "system" and instructions is None and not items:
            instructions = message["content"]
        elif role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]}
            )
        elif message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"type": "message", "role": role, "content": message["content"]})
    request: dict[str, Any] = {"model": chat["model"], "input": items}
    if instructions is not None:
        request["instructions"] = instructions
    if "tools" in chat:
        request["tools"] = [{"type": "function", **tool["function"]} for tool in chat["tools"]]
    return request


def _record() -> RunRecord:
    record = RunRecord("resp_bench", "bench-direct", "direct")
    record.stages["api"] = StageRecord("bench-api@http://x/v1", Usage(120, 40, 160), 5.0, 1, 1, True, True)
    record.answer = Answer(payloads.ANSWER, None, "stop")
    return record


def _chunks() -> list[bytes]:
    text = payloads.ANSWER
    pieces = [text[i : i + max(1, len(text) // 20)] for i in range(0, len(text), max(1, len(text) // 20))][:20]
    return [
        json.dumps(
            {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": p}}]}
        ).encode()
        for p in pieces
    ]


def chat_stream(chunks: list[bytes], record: RunRecord) -> bytes:
    writer = ChunkWriter(completion_id="chatcmpl-bench", served_model="bench-direct", include_usage=True)
    return b"".join(writer.relayed([chunk]) for chunk in chunks) + writer.tail(record, None)


def responses_stream(chunks: list[bytes], record: RunRecord) -> bytes:
    events = ResponsesEvents(response_id="resp_bench", served_model="bench-direct", echo=Echo())
    return b"".join(events.relayed([chunk]) for chunk in chunks) + events.tail(record, None)


def run_all(quick: bool = False) -> dict[str, Any]:
    budget, repeats = (0.15, 3) if quick else (1.0, 7)
    timed = functools.partial(time_per_call, budget=budget, repeats=repeats)
    results: dict[str, Any] = {"request": {}}
    for size in SIZES:
        chat = payloads.request("bench-direct", size)
        chat_body = json.dumps(chat).encode()
        responses_body = json.dumps(responses_request(chat)).encode()
        chat_us = timed(lambda body=chat_body: decode_request(body)) * 1e6
        responses_us = timed(lambda body=responses_body: INBOUND.decode(body, max_messages=None)) * 1e6
        results["request"][size] = {
            "chat_bytes": len(chat_body),
            "responses_bytes": len(responses_body),
            "chat_us": chat_us,
            "responses_us": responses_us,
            "ratio": responses_us / chat_us,
        }
    record, chunks = _record(), _chunks()
    results["answer"] = {
        "chat_us": timed(lambda: completion(record, completion_id="chatcmpl-bench")) * 1e6,
        "responses_us": timed(lambda: outbound.body(record, Echo(), response_id="resp_bench")) * 1e6,
    }
    results["stream"] = {
        "chunks": len(chunks),
        "chat_us": timed(lambda: chat_stream(chunks, record)) * 1e6,
        "responses_us": timed(lambda: responses_stream(chunks, record)) * 1e6,
    }
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'request decode':<30}{'chat B':>9}{'resp. B':>9}{'chat µs':>10}{'responses µs':>14}{'ratio':>8}"]
    for size, row in results["request"].items():
        lines.append(
            f"{size:<30}{row['chat_bytes']:>9}{row['responses_bytes']:>9}{row['chat_us']:>10.1f}"
            f"{row['responses_us']:>14.1f}{row['ratio']:>7.1f}x"
        )
    answer, stream = results["answer"], results["stream"]
    lines.append(f"{'answer body':<48}{answer['chat_us']:>10.1f}{answer['responses_us']:>14.1f}")
    label = f"stream of {stream['chunks']} chunks + tail"
    lines.append(f"{label:<48}{stream['chat_us']:>10.1f}{stream['responses_us']:>14.1f}")
    return "\n".join(lines)


def main() -> None:
    micro.cli(__doc__, run_all, format_table)


if __name__ == "__main__":
    main()
