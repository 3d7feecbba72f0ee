"""Micro-benchmarks of the Anthropic Messages mapping (`python -m benchmarks.anthropic_mapping [--quick]`).

What a Claude stage target adds to a stage call, and what `/messages` adds to a request, per call in µs:
- upstream: the 1.5 KB and 200 KB-with-64-tools chat bodies as Messages requests (`messages_request`), against
  the same body encoded as chat completions (`msgspec` encode, what an OpenAI target costs); a Messages answer
  read back as a `chat.completion`; one streamed answer's events translated into chunks (per event);
- inbound: a Messages request decoded into the run's `ChatRequest` (`decode_messages`), against the same
  conversation sent as chat completions (`decode_request`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from adapter_critic.protocols.anthropic import answers
from adapter_critic.protocols.anthropic.inbound import decode_messages
from adapter_critic.protocols.anthropic.outbound import messages_request
from adapter_critic.request.decode import decode_request

from . import micro, payloads
from .micro import time_per_call

_encoder = msgspec.json.Encoder()


def chat_body(size: str) -> dict[str, Any]:
    body = payloads.request(payloads.API_MODEL, size)
    body.pop("stream", None)
    return body


def messages_answer() -> bytes:
    """A Messages answer with the benchmark's answer text and usage."""
    usage = {"input_tokens": payloads.USAGE["prompt_tokens"], "output_tokens": payloads.USAGE["completion_tokens"]}
    content = [{"type": "text", "text": payloads.ANSWER}]
    return _encoder.encode(
        {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": content}
        | {"stop_reason": "end_turn", "stop_sequence": None, "usage": usage}
    )


def stream_events(pieces: int = 18) -> list[bytes]:
    """The `data` payloads of a streamed Messages answer: start, block start, `pieces` deltas, stop, delta, stop."""
    text = payloads.ANSWER
    step = max(1, len(text) // pieces)
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": []}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "usage": {"input_tokens": 412, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[i : i + step]}}
        for i in range(0, len(text), step)
    ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 87}},
        {"type": "message_stop"},
    ]
    return [_encoder.encode(event) for event in events]


def messages_request_bytes() -> bytes:
    """The 1.5 KB request's conversation as a Messages request (system prompt top-level)."""
    body = chat_body("1.5k")
    system = [m["content"] for m in body["messages"] if m["role"] == "system"]
    turns = [m for m in body["messages"] if m["role"] != "system"]
    request = {"model": "bench-direct", "max_tokens": 512, "system": "\n\n".join(system), "messages": turns}
    return _encoder.encode(request)


def translate_stream(events: list[bytes]) -> int:
    translator = answers.StreamTranslator()
    return sum(len(translator.payloads(event)) for event in events)


def run_all(quick: bool = False) -> dict[str, Any]:
    budget, repeats = (0.15, 3) if quick else (1.0, 7)

    def us(fn: Any) -> float:
        return time_per_call(fn, budget=budget, repeats=repeats) * 1e6

    results: dict[str, Any] = {"upstream_request": {}}
    for size in ("1.5k", "200k"):
        body = chat_body(size)
        results["upstream_request"][size] = {
            "messages_us": us(lambda body=body: messages_request(body, stream=False, default_max_tokens=4096)),
            "chat_us": us(lambda body=body: _encoder.encode(body)),
        }
    answer = messages_answer()
    results["answer_us"] = us(lambda: answers.completion(answer))
    events = stream_events()
    results["stream_events"] = len(events)
    results["stream_per_event_us"] = us(lambda: translate_stream(events)) / len(events)
    inbound = messages_request_bytes()
    chat = payloads.request_bytes("bench-direct")
    results["inbound_messages_us"] = us(lambda: decode_messages(inbound, max_messages=None))
    results["inbound_chat_us"] = us(lambda: decode_request(chat))
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'stage call to a Claude target':<40}{'Messages µs':>13}{'chat completions µs':>21}"]
    for size, row in results["upstream_request"].items():
        lines.append(f"{'request body, ' + size:<40}{row['messages_us']:>13.1f}{row['chat_us']:>21.1f}")
    lines.append(f"{'answer read back as chat.completion':<40}{results['answer_us']:>13.1f}")
    per_event = f"stream, per event ({results['stream_events']} events)"
    lines.append(f"{per_event:<40}{results['stream_per_event_us']:>13.2f}")
    lines.append(f"{'/messages request decode (1.5 KB)':<40}{results['inbound_messages_us']:>13.1f}")
    lines.append(f"{'/chat/completions request decode':<40}{'':>13}{results['inbound_chat_us']:>21.1f}")
    return "\n".join(lines)


def main() -> None:
    micro.cli(__doc__, run_all, format_table)


if __name__ == "__main__":
    main()
