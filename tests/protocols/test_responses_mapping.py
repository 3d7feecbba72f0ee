"""The Responses API mapping both ways, on request and answer shapes as the OpenAI SDK sends and reads them: a
Responses request onto the run's chat request, a finished run onto the `response` object, and every stream
event, each validated against the `openai` package's own types."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response as SDKResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from adapter_critic.core import Answer, Usage
from adapter_critic.errors import RequestError, UpstreamError, render_error
from adapter_critic.events import RunRecord, StageRecord
from adapter_critic.protocols.responses import outbound
from adapter_critic.protocols.responses.inbound import Echo, Mapped, map_request
from adapter_critic.protocols.responses.protocol import INBOUND
from adapter_critic.protocols.responses.stream import ResponsesEvents
from adapter_critic.request.decode import decode_request

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOL = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


def mapped(**request: Any) -> Mapped:
    return map_request(json.dumps({"model": "m", **request}).encode())


def chat_of(**request: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(mapped(**request).chat_body)
    return body


def refused(**request: Any) -> RequestError:
    with pytest.raises(RequestError) as caught:
        mapped(**request)
    return caught.value


# -- requests --------------------------------------------------------------------------------------------------


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    chat = chat_of(input="Hello", instructions="Be brief.")
    assert chat == {
        "model": "m",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
    }
    request = decode_request(mapped(input="Hello").chat_body)  # what the run gets is a valid chat request
    assert [m.role for m in request.messages] == ["user"] and request.stream is False


def test_input_items_become_messages_with_chat_content_parts() -> None:
    chat = chat_of(
        input=[
            {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                ],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "One part"}]},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "A cat.", "annotations": [], "logprobs": []}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ]
    )
    assert chat["messages"] == [
        {"role": "developer", "content": "Rules."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
        },
        {"role": "user", "content": "One part"},
        {"role": "assistant", "content": "A cat."},
    ]


def test_function_calls_join_their_turn_and_outputs_become_tool_messages() -> None:
    chat = chat_of(
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"c":1}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rain"}]},
            {"type": "function_call", "call_id": "call_c", "name": "get_time", "arguments": ""},
        ]
    )
    call = {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "call_a", **call},
                {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"c":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_c", "type": "function", "function": {"name": "get_time", "arguments": ""}}],
        },
    ]
    decode_request(json.dumps(chat).encode())  # a valid chat request


def test_options_are_mapped_and_settings_echoed() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    result = mapped(
        input="Hi",
        tools=[TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=64,
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
        reasoning={"effort": "low"},
        metadata={"k": "v"},
        user="u1",
        store=True,
        include=["reasoning.encrypted_content"],
        truncation="auto",
        top_k=5,  # a vendor field: forwarded, as in a chat request
        x_adapter_critic={"mode": "critic"},
        stream=True,
    )
    chat = json.loads(result.chat_body)
    assert chat == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "top_k": 5,
        "x_adapter_critic": {"mode": "critic"},
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 64,
        "parallel_tool_calls": False,
        "user": "u1",
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
        "reasoning_effort": "low",
        "stream": True,
    }
    assert result.stream
    request = decode_request(result.chat_body)
    assert request.stream and request.overrides is not None and request.overrides.mode == "critic"
    echo = result.echo
    assert (echo.temperature, echo.top_p, echo.max_output_tokens, echo.parallel_tool_calls) == (0.2, 0.9, 64, False)
    assert msgspec.json.decode(echo.tools) == [TOOL] and echo.metadata == {"k": "v"} and echo.user == "u1"
    assert msgspec.json.decode(echo.tool_choice) == {"type": "function", "name": "get_weather"}
    assert chat_of(input="x", text={"format": {"type": "json_object"}})["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat_of(input="x", text={"format": {"type": "text"}})
    assert chat_of(input="x", tools=[TOOL], tool_choice="required")["tool_choice"] == "required"
    # Without tools, tool settings are echoed but not sent (chat APIs refuse them).
    alone = mapped(input="x", tool_choice="none", parallel_tool_calls=False)
    assert json.loads(alone.chat_body) == {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert msgspec.json.decode(alone.echo.tool_choice) == "none" and alone.echo.parallel_tool_calls is False


@pytest.mark.parametrize(
    ("request_fields", "param", "words"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
        ({"conversation": "conv_1"}, "conversation", "keeps no conversations"),
        ({"background": True}, "background", "while you wait"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools only"),
        ({"tool_choice": "web"}, "tool_choice", "auto, none, required"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "required"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "keeps no items"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "user, assistant, system, developer"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, None, "no"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_data": "x"}]}]}, None, "input_text"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "required"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content", "Expected"),
        ({"input": [{"type": "computer_call"}]}, "input[0].type", "not supported"),
        ({"input": []}, "input", "empty"),
        ({"temperature": "hot"}, "temperature", "Expected"),
    ],
)
def test_what_cannot_be_mapped_is_a_400_naming_the_field(
    request_fields: dict[str, Any], param: str | None, words: str
) -> None:
    error = refused(**{"input": "Hi", **request_fields})
    assert error.status_code == 400
    assert words in error.message
    if param is not None:
        assert error.param == param
    else:
        assert error.param is not None and error.param.startswith("input[0].content[0]")


def test_missing_model_or_input_and_too_many_items() -> None:
    assert map_error(b'{"input": "x"}').param == "model"
    assert map_error(b'{"model": "m"}').param == "input"
    assert map_error(b"[1]").message == "The request body must be a JSON object."
    with pytest.raises(RequestError) as caught:
        map_request(json.dumps({"model": "m", "input": [{"role": "user", "content": "x"}] * 3}).encode(), max_items=2)
    assert caught.value.param == "input" and "at most 2" in caught.value.message


def map_error(body: bytes) -> RequestError:
    with pytest.raises(RequestError) as caught:
        map_request(body)
    return caught.value


# -- answers ---------------------------------------------------------------------------------------------------

WEATHER_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"c":"P"}'}}


def record(answer: Answer, usage: Usage | None = None) -> RunRecord:
    run = RunRecord("resp_x", "served", "critic")
    run.stages["api_draft"] = StageRecord("m@u", usage or Usage(1, 2, 3), 5.0, 1, 1, True, True)
    run.answer = answer
    run.status = "ok"
    return run


def body_of(run: RunRecord, echo: Echo | None = None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(outbound.body(run, echo or Echo(), response_id="resp_1"))
    SDKResponse.model_validate(data)  # the shape the SDK reads
    return data


def test_a_text_answer_is_one_message_with_usage_and_the_extension() -> None:
    usage = Usage(10, 4, 14, {"cached_tokens": 6}, {"reasoning_tokens": 2})
    echo = mapped(input="Hi", metadata={"a": "b"}, instructions="Be brief.", temperature=0.5).echo
    data = body_of(record(Answer("Paris.", None, "stop"), usage), echo)
    assert data["id"] == "resp_1" and data["object"] == "response" and data["model"] == "served"
    assert data["status"] == "completed" and data["incomplete_details"] is None and data["error"] is None
    assert data["store"] is False and data["previous_response_id"] is None
    assert (data["instructions"], data["metadata"], data["temperature"]) == ("Be brief.", {"a": "b"}, 0.5)
    [message] = data["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    assert message["id"].startswith("msg_")
    assert message["content"] == [{"type": "output_text", "text": "Paris.", "annotations": [], "logprobs": []}]
    assert data["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 14,
    }
    assert data["adapter_critic"]["mode"] == "critic"
    assert data["adapter_critic"]["tokens"]["total"]["total_tokens"] == 14


def test_tool_calls_are_function_call_items_and_a_length_stop_is_incomplete() -> None:
    data = body_of(record(Answer(None, [WEATHER_CALL], "tool_calls")))
    [call] = data["output"]
    assert call["type"] == "function_call" and call["id"].startswith("fc_") and call["status"] == "completed"
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_1", "get_weather", '{"c":"P"}')
    both = body_of(record(Answer("Let me check.", [WEATHER_CALL], "tool_calls")))["output"]
    assert [item["type"] for item in both] == ["message", "function_call"]

    cut = body_of(record(Answer("Paris is the capi", None, "length")))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["status"] == "incomplete"
    empty = body_of(record(Answer(None, None, "stop")))
    assert empty["output"][0]["content"][0]["text"] == ""


# -- stream events ---------------------------------------------------------------------------------------------


def parse(stream: bytes) -> list[dict[str, Any]]:
    """SSE `event:`/`data:` pairs, each checked: the event name is the payload's type, and the SDK reads it."""
    events = []
    for block in stream.decode().split("\n\n"):
        if not block:
            continue
        name, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        EVENTS.validate_python(payload)
        events.append(payload)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def chunk(content: str | None = None, calls: list[Any] | None = None, finish: str | None = None) -> bytes:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls is not None:
        delta["tool_calls"] = calls
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return msgspec.json.encode({"id": "c", "object": "chat.completion.chunk", "choices": [choice]})


def writer() -> ResponsesEvents:
    return ResponsesEvents(response_id="resp_s", served_model="served", echo=Echo())


def test_a_streamed_text_answer_is_the_whole_event_sequence() -> None:
    events = writer()
    out = events.relayed([chunk(""), chunk("Par")]) + events.relayed([chunk("is.")])
    out += events.tail(record(Answer("Paris.", None, "stop")), chunk(finish="stop"))
    parsed = parse(out)
    assert [e["type"] for e in parsed] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert parsed[0]["response"]["status"] == "in_progress" and "adapter_critic" not in parsed[0]["response"]
    assert [e["delta"] for e in parsed if e["type"] == "response.output_text.delta"] == ["Par", "is."]
    assert parsed[6]["text"] == "Paris."
    item_id = parsed[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in parsed[3:8])
    completed = parsed[-1]["response"]
    assert completed["id"] == "resp_s" and completed["status"] == "completed"
    assert completed["output"][0]["id"] == item_id and completed["output"][0]["content"][0]["text"] == "Paris."
    assert completed["usage"]["total_tokens"] == 3 and completed["adapter_critic"]["mode"] == "critic"


def test_streamed_tool_calls_are_function_call_items_with_argument_deltas() -> None:
    events = writer()
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    out = events.relayed(
        [
            chunk("Checking."),
            chunk(calls=[first]),
            chunk(calls=[{"index": 0, "function": {"arguments": '{"c":'}}]),
            chunk(calls=[{"index": 0, "function": {"arguments": '"P"}'}}]),
            chunk(calls=[{"index": 1, "id": "call_2", "function": {"name": "get_time", "arguments": "{}"}}]),
        ]
    )
    out += events.tail(record(Answer("Checking.", None, "tool_calls")), chunk(finish="tool_calls"))
    parsed = parse(out)
    assert [e["type"] for e in parsed] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert parsed[8]["output_index"] == 1 and parsed[8]["item"]["call_id"] == "call_1"
    assert parsed[11]["arguments"] == '{"c":"P"}'
    output = parsed[-1]["response"]["output"]
    assert [(i["type"], i.get("call_id"), i.get("arguments")) for i in output] == [
        ("message", None, None),
        ("function_call", "call_1", '{"c":"P"}'),
        ("function_call", "call_2", "{}"),
    ]


def test_an_answer_known_whole_streams_as_events_and_a_length_stop_ends_incomplete() -> None:
    events = writer()
    out = events.answer(Answer("Paris", [WEATHER_CALL], "length"))
    out += events.tail(record(Answer("Paris", [WEATHER_CALL], "length")), None)
    parsed = parse(out)
    types = [e["type"] for e in parsed]
    assert types[-1] == "response.incomplete" and "response.function_call_arguments.done" in types
    final = parsed[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["status"] for item in final["output"]] == ["completed", "incomplete"]
    assert final["output"][1]["arguments"] == '{"c":"P"}'
    plain = body_of(record(Answer("Paris", [WEATHER_CALL], "length")))
    assert [item["status"] for item in plain["output"]] == ["completed", "incomplete"]

    empty = writer()
    parsed = parse(empty.tail(record(Answer("", None, "stop")), None))
    assert [e["type"] for e in parsed][2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_a_failure_after_the_start_is_an_error_event_then_response_failed() -> None:
    events = writer()
    error = UpstreamError(stage="critic", target="c@u", kind="timeout", detail="timed out after 1s.")
    parsed = parse(events.relayed([chunk("Pa")]) + events.error_event(render_error(error)))
    assert [e["type"] for e in parsed][-2:] == ["error", "response.failed"]
    assert parsed[-2]["code"] == "upstream_timeout" and "critic" in parsed[-2]["message"]
    failed = parsed[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["error"]["type"] == "upstream_error" and "critic" in failed["error"]["message"]


def test_progress_is_an_in_progress_event_carrying_the_stage() -> None:
    events = writer()
    parsed = parse(events.progress("api_draft", True, 12.5) + events.progress("critic", False, 3.0))
    assert [e["type"] for e in parsed] == ["response.created", "response.in_progress"] + ["response.in_progress"] * 2
    assert parsed[2]["adapter_critic"]["progress"] == {"stage": "api_draft", "status": "ok", "ms": 12.5}
    assert parsed[3]["adapter_critic"]["progress"]["status"] == "failed"


# -- hostile input (hypothesis): a chat request the run can take, or a 400, never another exception --------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
ITEM_KEYS = ["type", "role", "content", "call_id", "name", "arguments", "output", "text", "image_url", "file_id"]
ITEM_TYPES = ["message", "function_call", "function_call_output", "reasoning", "item_reference", "input_text"]
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal", "x"])},
    optional={"text": JSON, "image_url": JSON, "file_id": JSON, "refusal": JSON},
)
ITEM = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(ITEM_TYPES) | JSON,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | JSON,
        "content": st.text(max_size=5) | st.lists(PART, max_size=3) | JSON,
        **{key: st.text(max_size=5) | JSON for key in ITEM_KEYS[3:]},
    },
)
REQUEST = st.fixed_dictionaries(
    {"model": st.sampled_from(["m", ""]) | JSON},
    optional={
        "input": st.text(max_size=5) | st.lists(ITEM, max_size=4) | JSON,
        "instructions": st.text(max_size=5) | JSON,
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["function", "web_search"])}, optional={"name": JSON, "parameters": JSON}
            ),
            max_size=2,
        )
        | JSON,
        "tool_choice": st.sampled_from(["auto", "none", "required", "x"]) | JSON,
        "text": st.fixed_dictionaries(
            {
                "format": st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "json_object", "json_schema", "x"])},
                    optional={"name": JSON, "schema": JSON},
                )
            }
        )
        | JSON,
        **{key: JSON for key in ("temperature", "max_output_tokens", "metadata", "stream", "store", "reasoning")},
        **{key: JSON for key in ("previous_response_id", "background", "x_adapter_critic", "parallel_tool_calls")},
    },
)


FUZZ = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(REQUEST)
def test_any_request_is_a_chat_request_or_a_400(request_fields: dict[str, Any]) -> None:
    try:
        request = INBOUND.decode(json.dumps(request_fields).encode(), max_messages=3)
    except RequestError as exc:
        assert exc.status_code == 400 and exc.message
        return
    assert request.messages and request.model  # a valid chat request, which the run can take


@FUZZ
@given(st.binary(max_size=64) | JSON.map(lambda value: json.dumps(value).encode()))
def test_any_body_is_a_chat_request_or_a_400(body: bytes) -> None:
    try:
        INBOUND.decode(body, max_messages=None)
    except RequestError as exc:
        assert exc.status_code == 400


def test_the_models_reasoning_is_a_reasoning_item_plain_and_streamed() -> None:
    completion = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "4", "reasoning_content": "2 + 2 is 4."},
                "finish_reason": "stop",
            }
        ]
    }
    answer = Answer("4", None, "stop", source=json.dumps(completion).encode())
    plain = body_of(record(answer))["output"]
    assert [item["type"] for item in plain] == ["reasoning", "message"]
    assert plain[0]["content"] == [{"type": "reasoning_text", "text": "2 + 2 is 4."}] and plain[0]["summary"] == []

    events = writer()
    thinking = [b'{"choices": [{"index": 0, "delta": {"reasoning_content": "2 + 2"}}]}']
    thinking.append(b'{"choices": [{"index": 0, "delta": {"reasoning": " is 4."}}]}')
    out = events.relayed([*thinking, chunk("4")]) + events.tail(record(Answer("4", None, "stop")), chunk(finish="stop"))
    parsed = parse(out)
    assert [e["type"] for e in parsed][2:8] == [
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    assert parsed[5]["text"] == "2 + 2 is 4." and parsed[7]["item"]["type"] == "message"
    output = parsed[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["content"][0]["text"] == "2 + 2 is 4." and output[1]["content"][0]["text"] == "4"
