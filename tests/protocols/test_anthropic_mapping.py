# Recorded payloads stay as the API sends them, one event or block per line.
# ruff: noqa: E501
"""Anthropic Messages mapping both ways, on payloads shaped as the API documents and records them: chat bodies
to Messages requests and Messages answers and event streams back (upstream side); Messages requests to chat
requests and run answers to messages and event streams (inbound side); error envelopes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from adapter_critic.core import Answer, Usage
from adapter_critic.errors import RequestError, UpstreamError, render_error
from adapter_critic.events import RunRecord, StageFinished
from adapter_critic.protocols.anthropic import answers
from adapter_critic.protocols.anthropic.inbound import decode_messages
from adapter_critic.protocols.anthropic.outbound import messages_request
from adapter_critic.protocols.anthropic.render import MessagesStream, message, render_messages_error
from adapter_critic.upstream.sse import StreamIncomplete, iter_batches


def request(body: dict[str, Any], *, stream: bool = False, default: int = 4096) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(messages_request(body, stream=stream, default_max_tokens=default))
    return result


# -- upstream side: chat bodies as Messages requests ---------------------------------------------------


def test_system_messages_go_to_the_top_level_system_in_order() -> None:
    body = {
        "model": "claude",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
            {"role": "user", "content": "Hi"},
        ],
    }
    sent = request(body)
    assert sent["system"] == "Be brief.\n\nUse French."
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert sent["max_tokens"] == 4096  # required there: the config default when nobody said


def test_a_multi_turn_tool_conversation_becomes_tool_use_and_merged_tool_results() -> None:
    body = {
        "model": "claude",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "24C"},
            {"role": "user", "content": "Thanks; which is warmer?"},
        ],
    }  # fmt: skip
    sent = request(body)
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",  # both results and the next question: one user turn, the results first
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "24C"},
                {"type": "text", "text": "Thanks; which is warmer?"},
            ],
        },
    ]


def test_images_options_tools_and_tool_choice_are_translated() -> None:
    body = {
        "model": "claude",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                ],
            }
        ],
        "max_tokens": 300,
        "stop": "END",
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "u-1",
        "seed": 7,  # no Messages counterpart: left out
        "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look up", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "parallel_tool_calls": False,
    }  # fmt: skip
    sent = request(body, stream=True)
    assert sent["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]
    assert (sent["max_tokens"], sent["stop_sequences"], sent["temperature"], sent["top_p"]) == (300, ["END"], 0.2, 0.9)
    assert sent["metadata"] == {"user_id": "u-1"}
    assert sent["stream"] is True
    assert "seed" not in sent
    assert sent["tools"] == [
        {
            "name": "lookup",
            "description": "Look up",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    assert sent["tool_choice"] == {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}), (None, None)],
)
def test_tool_choice_modes(choice: str | None, expected: dict[str, Any] | None) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = {"model": "c", "messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": choice}
    assert request(body).get("tool_choice") == expected


def test_max_completion_tokens_and_raw_json_values_are_read() -> None:
    body = {
        "model": "claude",
        "messages": msgspec.Raw(b'[{"role": "user", "content": "Hi"}]'),  # the request's messages as sent
        "max_completion_tokens": msgspec.Raw(b"77"),
    }
    assert request(body)["max_tokens"] == 77


# -- upstream side: Messages answers as chat completions -------------------------------------------------

RECORDED_MESSAGE = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQB"},
        {"type": "text", "text": "I'll check the weather."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835", "name": "get_weather", "input": {"location": "Paris"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 40,
        "service_tier": "standard",
    },
}


def test_a_recorded_message_reads_as_a_chat_completion() -> None:
    translated = answers.completion(json.dumps(RECORDED_MESSAGE).encode())
    assert translated is not None
    completion = json.loads(translated)
    choice = completion["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": "I'll check the weather.",
        "tool_calls": [
            {
                "id": "toolu_01A09q90qw90lq917835",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
            }
        ],
        "reasoning_content": "The user wants the weather.",
    }
    assert choice["finish_reason"] == "tool_calls"
    assert completion["usage"] == {
        "prompt_tokens": 2112,  # input + cache reads + cache writes
        "completion_tokens": 40,
        "total_tokens": 2152,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_creation_tokens": 100},
    }


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        (None, "stop"),
    ],
)
def test_stop_reasons(stop: str | None, finish: str) -> None:
    answer = {**RECORDED_MESSAGE, "content": [{"type": "text", "text": "x"}], "stop_reason": stop}
    translated = answers.completion(json.dumps(answer).encode())
    assert translated is not None
    assert json.loads(translated)["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize("body", [b"not json", b'{"object": "chat.completion", "choices": []}', b"[]"])
def test_what_is_not_a_message_is_refused(body: bytes) -> None:
    assert answers.completion(body) is None


RECORDED_STREAM = b"""event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"cache_read_input_tokens":30,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'s check"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"Paris\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""


async def _reads(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _translated(*parts: bytes) -> list[dict[str, Any]]:
    return [json.loads(p) async for batch in answers.chunks(iter_batches(_reads(*parts))) for p in batch]


@pytest.mark.anyio
async def test_a_recorded_event_stream_reads_as_chat_completion_chunks() -> None:
    chunks = await _translated(RECORDED_STREAM[:500], RECORDED_STREAM[500:])
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content") or "" for d in deltas) == "Okay, let's check"
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert "".join(call["function"]["arguments"] for call in calls) == '{"location": "Paris"}'
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
    assert finishes[-1] == "tool_calls" and finishes.count("tool_calls") == 1
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 502,
        "completion_tokens": 89,
        "total_tokens": 591,
        "prompt_tokens_details": {"cached_tokens": 30},
    }
    assert {chunk["id"] for chunk in chunks} == {"msg_014p7gG3wDgGV9EUtLvnow3U"}


@pytest.mark.anyio
async def test_message_starts_input_tokens_are_a_usage_chunk_right_after_the_role_chunk() -> None:
    # Known before any text: the relay counts them from the start, and the last usage chunk replaces them.
    head = RECORDED_STREAM.split(b"event: content_block_start")[0]
    chunks = await _translated(head + b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"] == []
    assert chunks[1]["usage"] == {
        "prompt_tokens": 502,
        "completion_tokens": 2,
        "total_tokens": 504,
        "prompt_tokens_details": {"cached_tokens": 30},
    }


@pytest.mark.anyio
async def test_an_error_event_becomes_an_error_payload() -> None:
    head = RECORDED_STREAM.split(b"event: content_block_stop")[0]
    error = b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    chunks = await _translated(head + error)
    assert chunks[-1] == {"error": {"message": "overloaded_error: Overloaded", "type": "overloaded_error"}}


@pytest.mark.anyio
async def test_a_stream_cut_before_message_stop_is_incomplete() -> None:
    with pytest.raises(StreamIncomplete):
        await _translated(RECORDED_STREAM.split(b"event: message_delta")[0])


@pytest.mark.anyio
async def test_nothing_after_message_stop_is_read() -> None:
    async def then_fail() -> AsyncIterator[bytes]:
        yield RECORDED_STREAM
        raise AssertionError("read past message_stop")

    batches = [b async for b in answers.chunks(iter_batches(then_fail()))]
    assert batches


# -- inbound side: Messages requests as chat requests ----------------------------------------------------


def test_a_messages_request_becomes_the_chat_request_it_means() -> None:
    body = {
        "model": "served",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "-3C"}]}, {"type": "text", "text": "And tomorrow?"}]},
        ],
        "stop_sequences": ["###"],
        "temperature": 0.5,
        "top_k": 5,
        "tools": [{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "metadata": {"user_id": "u-9"},
        "stream": True,
        "x_adapter_critic": {"mode": "direct"},
    }  # fmt: skip
    chat = decode_messages(json.dumps(body).encode(), max_messages=None)
    assert chat.model == "served"
    assert chat.stream and chat.include_usage
    assert chat.overrides is not None and chat.overrides.mode == "direct"
    assert json.loads(bytes(chat.messages_json)) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "-3C"},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    options = {key: json.loads(bytes(value)) for key, value in chat.options.items()}
    assert options["max_tokens"] == 1024 and options["stop"] == ["###"] and options["temperature"] == 0.5
    assert options["tool_choice"] == "required" and options["parallel_tool_calls"] is False
    assert options["user"] == "u-9"
    assert options["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "parameters": {"type": "object"}, "description": "Weather"},
        }
    ]
    assert "top_k" not in options


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "s", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "s", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "s", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "audio"}]}]}, None),
        ({"model": "s", "max_tokens": 5, "messages": []}, "messages"),
    ],
)
def test_an_invalid_messages_request_is_a_400_naming_the_field(body: dict[str, Any], param: str | None) -> None:
    with pytest.raises(RequestError) as caught:
        decode_messages(json.dumps(body).encode(), max_messages=None)
    assert caught.value.status_code == 400
    if param is not None:
        assert param in (caught.value.param or "") or param in caught.value.message


def test_a_server_tool_is_refused_with_a_reason() -> None:
    body = {
        "model": "s",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }
    with pytest.raises(RequestError, match="server tool"):
        decode_messages(json.dumps(body).encode(), max_messages=None)


# -- inbound side: run answers as messages and event streams ---------------------------------------------


def _record(answer: Answer, usage: Usage | None = None) -> RunRecord:
    record = RunRecord("msg_1", "served", "critic")
    record.apply(StageFinished("api", "m@u", (), usage or Usage(10, 4, 14), 1.0))
    record.answer = answer
    return record


CALL = {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}


def test_a_finished_run_is_a_message_with_the_extension() -> None:
    usage = Usage(110, 4, 114, prompt_tokens_details={"cached_tokens": 100})
    body = json.loads(message(_record(Answer("Cold.", [CALL], "tool_calls"), usage), response_id="msg_1"))
    assert body["type"] == "message" and body["role"] == "assistant" and body["model"] == "served"
    assert body["content"] == [
        {"type": "text", "text": "Cold."},
        {"type": "tool_use", "id": "call_9", "name": "weather", "input": {"city": "Oslo"}},
    ]
    assert body["stop_reason"] == "tool_use" and body["stop_sequence"] is None
    assert body["usage"] == {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 100}
    assert body["adapter_critic"]["mode"] == "critic"


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"), (None, "end_turn")],
)
def test_finish_reasons_as_stop_reasons(finish: str | None, stop: str) -> None:
    assert json.loads(message(_record(Answer("x", None, finish)), response_id="m"))["stop_reason"] == stop


def _events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in data.decode().strip().split("\n\n"):
        kind, payload = block.split("\n", 1)
        assert kind.startswith("event: ")
        parsed = json.loads(payload.removeprefix("data: "))
        assert parsed["type"] == kind.removeprefix("event: ")
        events.append((parsed["type"], parsed))
    return events


def _chunk(delta: dict[str, Any]) -> bytes:
    return json.dumps({"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode()


def test_relayed_chunks_stream_as_anthropics_event_sequence() -> None:
    stream = MessagesStream(response_id="msg_1", served_model="served")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
    data = stream.relayed([_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hel"})])
    data += stream.relayed([_chunk({"content": "lo"}), _chunk({"tool_calls": [call]})])
    data += stream.relayed([_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})])
    data += stream.relayed([_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})])
    data += stream.tail(_record(Answer("Hello", None, "tool_calls")), None)
    events = _events(data)
    assert [kind for kind, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["id"] == "msg_1"
    assert events[5][1] == {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "call_1", "name": "weather", "input": {}},
    }
    assert "".join(e["delta"]["partial_json"] for k, e in events if e.get("index") == 1 and k.endswith("delta")) == (
        '{"city":"Oslo"}'
    )
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": 10, "output_tokens": 4}
    assert delta["adapter_critic"]["mode"] == "critic"


def test_a_known_answer_streams_whole_and_an_error_is_an_error_event() -> None:
    stream = MessagesStream(response_id="msg_2", served_model="served")
    events = _events(stream.answer(Answer("Done.", [CALL], "tool_calls")))
    assert [kind for kind, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
    ]
    assert json.loads(events[-1][1]["delta"]["partial_json"]) == {"city": "Oslo"}
    error = UpstreamError(stage="critic", target="c@u", kind="timeout", detail="did not answer.")
    ending = stream.error_event(render_messages_error(error))
    assert _events(ending) == [
        ("error", {"type": "error", "error": {"type": "timeout_error", "message": error.message}})
    ]


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (RequestError("bad", param="x"), 400, "invalid_request_error"),
        (RequestError("nope", status_code=404), 404, "not_found_error"),
        (RequestError("big", status_code=413), 413, "request_too_large"),
        (UpstreamError(stage="api", target="a@u", kind="status", detail="429", upstream_status=429), 429, "rate_limit_error"),
        (UpstreamError(stage="api", target="a@u", kind="status", detail="529", upstream_status=529), 502, "api_error"),
        (UpstreamError(stage="api", target="a@u", kind="timeout", detail="slow"), 504, "timeout_error"),
    ],
)  # fmt: skip
def test_errors_in_anthropics_envelope_with_the_same_status(error: Any, status: int, kind: str) -> None:
    rendered = render_messages_error(error)
    assert rendered.status == status == render_error(error).status
    assert json.loads(rendered.body) == {"type": "error", "error": {"type": kind, "message": error.message}}


def test_a_relayed_upstream_error_keeps_its_message_and_type() -> None:
    body = b'{"type": "error", "error": {"type": "permission_error", "message": "No access to claude-x."}}'
    error = UpstreamError(
        stage="api", target="a@u", kind="status", detail="403", upstream_status=403, body=body, relay=True
    )
    rendered = render_messages_error(error)
    assert rendered.status == 403
    assert json.loads(rendered.body) == {
        "type": "error",
        "error": {"type": "permission_error", "message": "No access to claude-x."},
    }
