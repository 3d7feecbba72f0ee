"""`decode_request`: §4 body validation (400 naming the field), byte-exact forwarding, overrides and streaming flags."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from adapter_critic import RequestError
from adapter_critic.errors import render_error
from adapter_critic.request.decode import ChatRequest, Overrides, decode_request

from ..conftest import AppFactory, make_config
from ..helpers import envelope, nested
from ..scripted_upstream import ScriptedUpstream

USER = b'{"role": "user", "content": "Hi"}'


def body(**fields: Any) -> bytes:
    data: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    data.update(fields)
    return json.dumps(data).encode()


def rejected(raw: bytes) -> RequestError:
    with pytest.raises(RequestError) as info:
        decode_request(raw)
    error = info.value
    assert error.status_code == 400
    assert error.error_type == "invalid_request_error"
    assert msgspec.json.decode(render_error(error).body)["error"]["param"] == error.param
    return error


def raw_options(request: ChatRequest) -> dict[str, bytes]:
    return {key: bytes(value) for key, value in request.options.items()}


# --- the minimum -----------------------------------------------------------------------------------------------------


def test_minimal_request() -> None:
    request = decode_request(b'{"model": "served", "messages": [' + USER + b"]}")
    assert request.model == "served"
    assert [(m.role, m.content) for m in request.messages] == [("user", "Hi")]
    assert [bytes(m) for m in request.raw_messages] == [USER]
    assert request.options == {}
    assert request.overrides is None
    assert request.stream is False
    assert request.include_usage is False


@pytest.mark.parametrize("raw", [b"", b" ", b"{", b"nope", b'{"model": }', b'{"model": "m",}', b"\xff\xfe"])
def test_body_that_is_not_json(raw: bytes) -> None:
    error = rejected(raw)
    assert "not valid JSON" in error.message


@pytest.mark.parametrize("raw", [b"[]", b'[{"model": "m"}]', b'"model"', b"1", b"null", b"true"])
def test_body_that_is_not_an_object(raw: bytes) -> None:
    error = rejected(raw)
    assert "JSON object" in error.message


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [' + USER + b"]}",
        b'{"model": "", "messages": [' + USER + b"]}",
        b'{"model": null, "messages": [' + USER + b"]}",
        b'{"model": 5, "messages": [' + USER + b"]}",
        b'{"model": ["m"], "messages": [' + USER + b"]}",
    ],
)
def test_model_must_be_a_non_empty_string(raw: bytes) -> None:
    assert rejected(raw).param == "model"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        ({}, "messages"),
        ("hi", "messages"),
        ([1], "messages[0]"),
        (["hi"], "messages[0]"),
        ([{"content": "no role"}], "messages[0].role"),
        ([{"role": "user", "content": "ok"}, {"role": "bot", "content": "x"}], "messages[1].role"),
        ([{"role": "User", "content": "x"}], "messages[0].role"),
        ([{"role": 1, "content": "x"}], "messages[0].role"),
        ([{"role": None, "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": {"text": "x"}}], "messages[0].content"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": True}], "messages[0].content"),
        ([{"role": "user"}, {"role": "user"}, {"role": "assistant", "content": 1.5}], "messages[2].content"),
    ],
)
def test_bad_messages_name_the_field(messages: Any, param: str) -> None:
    error = rejected(body(messages=messages))
    assert error.param == param
    assert param in error.message


def test_missing_messages() -> None:
    assert rejected(b'{"model": "m"}').param == "messages"


def test_unknown_role_lists_the_valid_roles() -> None:
    message = rejected(body(messages=[{"role": "bot", "content": "x"}])).message
    for role in ("system", "developer", "user", "assistant", "tool"):
        assert role in message


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool"])
def test_every_role_is_accepted(role: str) -> None:
    assert decode_request(body(messages=[{"role": role, "content": "x"}])).messages[0].role == role


@pytest.mark.parametrize(
    "content",
    [
        "text",
        "",
        None,
        [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:..."}}],
        [],
    ],
)
def test_content_may_be_a_string_parts_or_null(content: Any) -> None:
    request = decode_request(body(messages=[{"role": "user", "content": content}]))
    assert request.messages[0].content == content


def test_content_may_be_absent() -> None:
    request = decode_request(body(messages=[{"role": "assistant", "tool_calls": [{"id": "c1"}]}]))
    assert request.messages[0].content is None
    assert request.messages[0].tool_calls == [{"id": "c1"}]


# --- nothing the client sent is dropped -------------------------------------------------------------------------------


FORWARDED = {
    b'"temperature"': b"1.0e2",
    b'"max_tokens"': b"256",
    b'"seed"': b"-0",
    b'"top_p"': b"0.50",
    b'"top_k"': b"7",
    b'"stop"': b'["\\n", "\\u00e9"]',
    b'"tools"': b'[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
    b'"x-vendor": {"deep": [1, 2.000, {"z": null}]}}}}]',
    b'"tool_choice"': b'{"type":"function","function":{"name":"f"}}',
    b'"response_format"': b'{ "type" : "json_object" }',
    b'"logit_bias"': b'{"50256": -100}',
    b'"vendor_flag"': b"true",
    b'"vendor_null"': b"null",
    b'"big"': b"123456789012345678901234567890",
    b'"unicode"': b'"caf\\u00e9 \xe2\x9c\x93"',
}


def test_every_unknown_top_level_field_is_kept_byte_for_byte() -> None:
    parts = [b'"model": "m"', b'"messages": [' + USER + b"]"]
    parts += [key + b": " + value for key, value in FORWARDED.items()]
    request = decode_request(b"{" + b", ".join(parts) + b"}")
    expected = {json.loads(key): value for key, value in FORWARDED.items()}
    assert raw_options(request) == expected


def test_unknown_message_fields_are_kept_byte_for_byte() -> None:
    messages = [
        b'{"role": "system", "content": "Be brief.", "name": "sys"}',
        USER,
        b'{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", '
        b'"function": {"name": "f", "arguments": "{\\"a\\": 1.0e2}"}}], "reasoning_content": "hmm", '
        b'"x_vendor": {"n": 1.50}}',
        b'{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "42", "cache": {"a": 1}}]}',
        b'{ "role" : "user" , "content" : "spaced" , "weight" : 1E3 }',
    ]
    raw = b'{"model": "m", "messages": [' + b", ".join(messages) + b"]}"
    request = decode_request(raw)
    assert [bytes(m) for m in request.raw_messages] == messages
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "user"]
    assert request.messages[2].tool_calls is not None
    assert request.messages[2].tool_calls[0]["id"] == "call_1"


def test_model_and_messages_are_not_options() -> None:
    request = decode_request(body(temperature=0))
    assert set(request.options) == {"temperature"}


# --- x_adapter_critic and extra_body -------------------------------------------------------------------------------


ALL_OVERRIDES: dict[str, Any] = {
    "mode": "critic",
    "api_model": "am",
    "api_base_url": "http://a/v1",
    "adapter_model": "dm",
    "adapter_base_url": "http://d/v1",
    "critic_model": "cm",
    "critic_base_url": "http://c/v1",
    "max_adapter_retries": 3,
}


def test_top_level_overrides() -> None:
    request = decode_request(body(x_adapter_critic=ALL_OVERRIDES))
    assert request.overrides == Overrides(**ALL_OVERRIDES)
    assert request.overrides_param == "x_adapter_critic"
    assert request.options == {}


def test_overrides_in_extra_body() -> None:
    request = decode_request(body(extra_body={"x_adapter_critic": {"mode": "adapter", "api_model": "x"}}))
    assert request.overrides == Overrides(mode="adapter", api_model="x")
    assert request.overrides_param == "extra_body.x_adapter_critic"
    assert request.options == {}


def test_top_level_overrides_win_over_extra_body() -> None:
    request = decode_request(
        body(
            x_adapter_critic={"mode": "direct"},
            extra_body={"x_adapter_critic": {"mode": "critic", "critic_model": "c"}},
        )
    )
    assert request.overrides == Overrides(mode="direct")
    assert request.overrides_param == "x_adapter_critic"


def test_empty_override_block_is_still_an_override_block() -> None:
    # `allow_overrides = false` must be able to reject even `{}`.
    assert decode_request(body(x_adapter_critic={})).overrides == Overrides()


def test_extra_body_keys_are_merged_into_options_top_level_winning() -> None:
    raw = (
        b'{"model": "m", "messages": [' + USER + b'], "temperature": 0.7, '
        b'"extra_body": {"temperature": 0.1, "top_k": 5, "chat_template_kwargs": {"enable_thinking": false}, '
        b'"x_adapter_critic": {"mode": "direct"}}}'
    )
    request = decode_request(raw)
    assert raw_options(request) == {
        "temperature": b"0.7",
        "top_k": b"5",
        "chat_template_kwargs": b'{"enable_thinking": false}',
    }
    assert request.overrides == Overrides(mode="direct")


@pytest.mark.parametrize(
    "fields",
    [
        {"x_adapter_critic": {"mode": "direct"}},
        {"extra_body": {"top_k": 1}},
        {"extra_body": {}},
        {"extra_body": {"x_adapter_critic": {"mode": "direct"}}},
        {"x_adapter_critic": {}, "extra_body": {"x_adapter_critic": {}}},
        {"extra_body": {"extra_body": {"x_adapter_critic": {}, "a": 1}}},
    ],
)
def test_neither_x_adapter_critic_nor_extra_body_is_forwarded(fields: dict[str, Any]) -> None:
    request = decode_request(body(**fields))
    assert "x_adapter_critic" not in request.options
    assert "extra_body" not in request.options


def test_extra_body_cannot_replace_model_or_messages() -> None:
    request = decode_request(body(extra_body={"model": "other", "messages": [], "seed": 1}))
    assert request.model == "m"
    assert raw_options(request) == {"seed": b"1"}


@pytest.mark.parametrize("extra_body", [[], "x", 1, True, None])
def test_extra_body_must_be_an_object(extra_body: Any) -> None:
    assert rejected(body(extra_body=extra_body)).param == "extra_body"


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"bogus": 1}, "bogus"),
        ({"mode": "direct", "apiModel": "x"}, "apiModel"),
        ({"mode": "chain"}, "mode"),
        ({"mode": 1}, "mode"),
        ({"mode": ""}, "mode"),
        ({"api_model": 5}, "api_model"),
        ({"api_model": ""}, "api_model"),
        ({"api_base_url": ["http://a/v1"]}, "api_base_url"),
        ({"adapter_model": {}}, "adapter_model"),
        ({"adapter_base_url": ""}, "adapter_base_url"),
        ({"critic_model": False}, "critic_model"),
        ({"critic_base_url": 1}, "critic_base_url"),
        ({"max_adapter_retries": "3"}, "max_adapter_retries"),
        ({"max_adapter_retries": 1.5}, "max_adapter_retries"),
        ({"max_adapter_retries": True}, "max_adapter_retries"),
        ({"max_adapter_retries": -1}, "max_adapter_retries"),
        ({"max_adapter_retries": 6}, "max_adapter_retries"),
        ({"max_adapter_retries": 10}, "max_adapter_retries"),
    ],
)
@pytest.mark.parametrize("place", ["x_adapter_critic", "extra_body.x_adapter_critic"])
def test_bad_override_names_the_field(place: str, overrides: dict[str, Any], param: str) -> None:
    raw = body(x_adapter_critic=overrides) if place == "x_adapter_critic" else body(extra_body={place[11:]: overrides})
    error = rejected(raw)
    assert error.param == f"{place}.{param}"
    assert f"`{place}.{param}`" in error.message


def test_unknown_override_field_lists_the_known_ones() -> None:
    message = rejected(body(x_adapter_critic={"api_url": "http://a/v1"})).message
    assert "api_url" in message
    for name in ALL_OVERRIDES:
        assert name in message


def test_unknown_override_mode_lists_the_modes() -> None:
    message = rejected(body(x_adapter_critic={"mode": "chain"})).message
    assert "'chain'" in message
    for mode in ("direct", "adapter", "critic"):
        assert mode in message


@pytest.mark.parametrize("value", [[], "critic", 1, True, None])
@pytest.mark.parametrize("place", ["x_adapter_critic", "extra_body.x_adapter_critic"])
def test_override_block_must_be_an_object(place: str, value: Any) -> None:
    raw = body(x_adapter_critic=value) if place == "x_adapter_critic" else body(extra_body={place[11:]: value})
    assert rejected(raw).param == place


@pytest.mark.parametrize("retries", [0, 1, 2, 3, 4, 5])
def test_max_adapter_retries_override_range(retries: int) -> None:
    request = decode_request(body(x_adapter_critic={"max_adapter_retries": retries}))
    assert request.overrides is not None
    assert request.overrides.max_adapter_retries == retries


def test_null_override_fields_mean_absent() -> None:
    request = decode_request(body(x_adapter_critic={"mode": None, "api_model": None, "max_adapter_retries": None}))
    assert request.overrides == Overrides()


def test_override_base_urls_lists_every_base_url_given() -> None:
    overrides = decode_request(body(x_adapter_critic=ALL_OVERRIDES)).overrides
    assert overrides is not None
    assert overrides.base_urls() == {
        "api_base_url": "http://a/v1",
        "adapter_base_url": "http://d/v1",
        "critic_base_url": "http://c/v1",
    }
    only = decode_request(body(x_adapter_critic={"critic_base_url": "http://c/v1"})).overrides
    assert only is not None
    assert only.base_urls() == {"critic_base_url": "http://c/v1"}


# --- streaming flags ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": False}, False, False),
        ({"stream": None}, False, False),
        ({"stream": True}, True, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": True, "stream_options": {"include_usage": False}}, True, False),
        ({"stream": True, "stream_options": {}}, True, False),
        ({"stream": True, "stream_options": None}, True, False),
        ({"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}, True, True),
        ({"extra_body": {"stream": True}}, True, False),
    ],
)
def test_stream_flags(fields: dict[str, Any], stream: bool, include_usage: bool) -> None:
    request = decode_request(body(**fields))
    assert request.stream is stream
    assert request.include_usage is include_usage


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream_options": "usage"}, "stream_options"),
        ({"stream_options": []}, "stream_options"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ],
)
def test_bad_stream_fields_name_the_field(fields: dict[str, Any], param: str) -> None:
    assert rejected(body(**fields)).param == param


def test_the_first_problem_is_reported_model_before_messages() -> None:
    assert rejected(b'{"model": 1, "messages": []}').param == "model"


def test_options_hold_raw_json() -> None:
    request = decode_request(body(temperature=0.2))
    assert isinstance(request.options["temperature"], msgspec.Raw)
    assert msgspec.json.decode(request.options["temperature"]) == 0.2


def test_body_errors_come_before_override_errors() -> None:
    raw = body(messages=[{"role": "bot"}], x_adapter_critic={"bogus": 1})
    assert rejected(raw).param == "messages[0].role"
    assert rejected(body(model="", x_adapter_critic={"mode": "x"})).param == "model"


# -- limits and hostile bodies, through the app ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_max_messages(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    assert make_config().max_messages == 2048
    messages = [{"role": "user", "content": str(i)} for i in range(4)]
    async with serve(make_config(max_messages=3)) as client:
        refused = await client.post("/chat/completions", json={"model": "m-direct", "messages": messages})
        fine = await client.post("/chat/completions", json={"model": "m-direct", "messages": messages[:3]})
    error = envelope(refused, 400)
    assert error["param"] == "messages" and "max_messages" in error["message"]
    assert fine.status_code == 200
    assert len(upstream.calls) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "what"),
    [
        (
            (
                '{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "tools": '
                + nested(100_000)
                + "}"
            ).encode(),
            "nested too deeply",
        ),
        (nested(5000).encode(), "nested too deeply"),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8"),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "seed": "\xc3"}', "not UTF-8"),
        (
            b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
            "not valid JSON",
        ),
        (
            b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "temperature": Infinity}',
            "not valid JSON",
        ),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "\\ud800"}]}', "not valid JSON"),
    ],
)
async def test_hostile_bodies_are_400(serve: AppFactory, upstream: ScriptedUpstream, content: bytes, what: str) -> None:
    async with serve() as client:
        response = await client.post("/chat/completions", content=content)
    assert what in envelope(response, 400)["message"]
    assert upstream.calls == []
