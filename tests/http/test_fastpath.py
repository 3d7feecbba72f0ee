"""The protocols' POST routes answered ahead of Starlette's middleware (`http.fastpath`): the same answers,
headers, auth and errors as through the middleware stack."""

from __future__ import annotations

import logging

import pytest
from starlette.types import Message, Receive, Scope, Send

from adapter_critic import create_app
from adapter_critic.http.fastpath import App, answer

from ..conftest import AppFactory, asgi_client, chat, make_config
from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio


def test_protocol_routes_take_the_fast_path_unless_cors_is_on() -> None:
    app = create_app(make_config())
    assert isinstance(app, App)
    assert set(app.post_routes) == {"/chat/completions", "/messages", "/responses"}
    assert create_app(make_config(cors_allowed_origins=["https://app.example"])).post_routes == {}


async def test_fast_path_answers_with_the_request_id(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        own = await client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": "req-1"})
        made = await client.post("/chat/completions", json=chat("m-direct"))
        streamed = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert own.status_code == made.status_code == streamed.status_code == 200
    assert own.headers["x-request-id"] == "req-1"
    assert made.headers["x-request-id"] == made.json()["id"]
    assert streamed.headers["x-request-id"].startswith("chatcmpl-")


async def test_fast_path_keeps_inbound_auth(
    monkeypatch: pytest.MonkeyPatch, upstream: ScriptedUpstream, serve: AppFactory
) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "sk-inbound")
    async with serve(make_config(auth_api_keys_env="INBOUND_KEYS")) as client:
        refused = await client.post("/chat/completions", json=chat("m-direct"))
        refused_messages = await client.post("/messages", json={"model": "m-direct", "max_tokens": 5, "messages": []})
        allowed = await client.post(
            "/chat/completions", json=chat("m-direct"), headers={"authorization": "Bearer sk-inbound"}
        )
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert refused_messages.status_code == 401 and refused_messages.json()["type"] == "error"  # Anthropic's envelope
    assert allowed.status_code == 200


async def test_other_methods_and_paths_still_go_through_starlette(serve: AppFactory) -> None:
    async with serve() as client:
        wrong_method = await client.get("/chat/completions")
        unknown = await client.post("/chat/completion", json=chat("m-direct"))
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["message"].startswith("Method GET")
    assert unknown.status_code == 404 and "x-request-id" in unknown.headers


async def test_an_unexpected_error_is_a_500_envelope_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("a bug")

    app = App(routes=[])
    app.post_routes = {"/broken": broken}
    with caplog.at_level(logging.ERROR, logger="adapter_critic"):
        async with asgi_client(app) as client:
            response = await client.post("/broken", content=b"{}")
    assert response.status_code == 500
    assert response.json()["error"] == {
        "message": "Internal server error; see the server log.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert "x-request-id" in response.headers
    assert any("unexpected error on POST /broken" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_an_error_after_the_response_started_is_logged_only(caplog: pytest.LogCaptureFixture) -> None:
    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise ValueError("a bug mid-answer")

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/half", "headers": []}
    with caplog.at_level(logging.ERROR, logger="adapter_critic"):
        await answer(half, scope, receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # nothing sent after the error
    assert any("unexpected error on POST /half" in r.getMessage() for r in caplog.records)


async def test_each_protocol_answers_with_its_own_form_of_request_id(serve: AppFactory) -> None:
    async with serve() as client:
        message = await client.post(
            "/messages", json={"model": "m-direct", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        )
        response = await client.post("/responses", json={"model": "m-direct", "input": "hi"})
        chat_completion = await client.post("/chat/completions", json=chat("m-direct"))
    for answered, prefix in ((message, "msg_"), (response, "resp_"), (chat_completion, "chatcmpl-")):
        assert answered.status_code == 200, answered.text
        assert answered.headers["x-request-id"] == answered.json()["id"]
        assert answered.json()["id"].startswith(prefix)
