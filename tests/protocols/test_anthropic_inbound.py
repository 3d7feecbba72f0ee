"""`POST /messages` in-process: any served model answered in the Messages shape, plain and as Anthropic's event
stream, errors in Anthropic's envelope with the §7 statuses, and inbound auth by `x-api-key` or Bearer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..conftest import AppFactory, make_config
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio


def messages(model: str, content: str = "Hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": content}], **extra}


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


async def test_a_critic_run_answers_a_message_with_the_extension(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="Draft."), Reply(content="Critique."), Reply(content="Final."))
    async with serve() as client:
        response = await client.post("/messages", json=messages("m-critic", "Q?"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["request-id"] == body["id"] and body["id"].startswith("msg_")
    assert body["type"] == "message" and body["role"] == "assistant" and body["model"] == "m-critic"
    assert body["content"] == [{"type": "text", "text": "Final."}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 6}  # three stages of 1 in, 2 out
    assert body["adapter_critic"]["intermediate"]["critic"] == "Critique."
    # Every stage got the request as chat completions: the client's max_tokens on the API calls.
    assert upstream.calls[0].body["max_tokens"] == 256
    assert upstream.calls[0].messages == [{"role": "user", "content": "Q?"}]


async def test_a_streamed_run_is_anthropics_event_sequence(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="Draft."), Reply(content="Critique."), Reply(content="The final answer."))
    async with serve() as client:
        response = await client.post("/messages", json=messages("m-critic", stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    found = events(response.text)
    kinds = [kind for kind, _ in found]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert "".join(e["delta"]["text"] for k, e in found if k == "content_block_delta") == "The final answer."
    delta = found[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"] == {"input_tokens": 3, "output_tokens": 6}
    assert delta["adapter_critic"]["intermediate"]["critic"] == "Critique."


async def test_tool_use_both_ways(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    call = {"id": "call_7", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    upstream.script(Reply(content=None, tool_calls=[call], finish_reason="tool_calls"))
    tools = [{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}]
    async with serve() as client:
        response = await client.post("/messages", json=messages("m-direct", tools=tools))
    body = response.json()
    assert body["content"] == [{"type": "tool_use", "id": "call_7", "name": "weather", "input": {"city": "Oslo"}}]
    assert body["stop_reason"] == "tool_use"
    sent = upstream.calls[0].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "parameters": {"type": "object"}, "description": "Weather"},
        }
    ]


@pytest.mark.parametrize(
    ("payload", "status", "kind"),
    [
        (messages("not-served"), 404, "not_found_error"),
        ({"model": "m-direct", "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error"),
        (messages("m-direct", x_adapter_critic={"bogus": 1}), 400, "invalid_request_error"),
    ],
)
async def test_errors_are_anthropic_envelopes(serve: AppFactory, payload: Any, status: int, kind: str) -> None:
    async with serve() as client:
        response = await client.post("/messages", json=payload)
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]
    assert response.headers["request-id"].startswith("msg_")


async def test_an_upstream_429_is_a_rate_limit_error_with_retry_after(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(status=429, body='{"error": {"message": "slow down"}}', headers={"retry-after": "9"}))
    async with serve() as client:
        response = await client.post("/messages", json=messages("m-direct"))
    assert response.status_code == 429 and response.headers["retry-after"] == "9"
    assert response.json()["error"]["type"] == "rate_limit_error"


async def test_a_body_over_the_limit_is_a_413_request_too_large(serve: AppFactory) -> None:
    async with serve(make_config(max_body_bytes=100)) as client:
        response = await client.post("/messages", json=messages("m-direct", "x" * 200))
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"


async def test_inbound_auth_takes_x_api_key_or_bearer(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "in-key-1")
    async with serve(make_config(auth_api_keys_env="INBOUND_KEYS")) as client:
        missing = await client.post("/messages", json=messages("m-direct"))
        wrong = await client.post("/messages", json=messages("m-direct"), headers={"x-api-key": "nope"})
        by_header = await client.post("/messages", json=messages("m-direct"), headers={"x-api-key": "in-key-1"})
        bearer = {"authorization": "Bearer in-key-1"}
        by_bearer = await client.post("/messages", json=messages("m-direct"), headers=bearer)
    assert missing.status_code == wrong.status_code == 401
    assert missing.json() == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "Missing API key: send it in an `x-api-key` header (or `Authorization: Bearer <key>`).",
        },
    }
    assert wrong.json()["error"]["type"] == "authentication_error"
    assert by_header.status_code == by_bearer.status_code == 200


async def test_a_forwarding_target_gets_the_callers_x_api_key(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    api = {"model": "api-model", "base_url": "http://upstream.test/v1", "forward_client_authorization": True}
    config = make_config(served_models={"m-own": {"mode": "direct", "api": api}})
    async with serve(config) as client:
        await client.post("/messages", json=messages("m-own"), headers={"x-api-key": "caller-key"})
    assert upstream.calls[0].headers["authorization"] == "Bearer caller-key"


async def test_overrides_ride_along_as_on_chat_completions(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        response = await client.post("/messages", json=messages("m-critic", x_adapter_critic={"mode": "direct"}))
    assert response.json()["adapter_critic"]["mode"] == "direct"
    assert len(upstream.calls) == 1


async def test_the_stop_sequence_that_ended_an_answer(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    # vLLM (and the demo model) say on the choice which stop string ended the answer; a number is a stop token.
    upstream.script(
        Reply(content="One two ", choice_extra={"stop_reason": "three"}),
        Reply(content="One two three.", choice_extra={"stop_reason": 128001}),
    )
    async with serve() as client:
        stopped = (await client.post("/messages", json=messages("m-direct", stop_sequences=["three"]))).json()
        ended = (await client.post("/messages", json=messages("m-direct"))).json()
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == "three"
    assert ended["stop_reason"] == "end_turn" and ended["stop_sequence"] is None
