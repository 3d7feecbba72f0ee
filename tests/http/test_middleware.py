"""`AdapterCriticMiddleware` around an app that serves chat completions itself (SPEC §1.2, §2).

Served models run through the pipeline with their stages called in-process on the wrapped app;
everything else reaches the wrapped app untouched, byte for byte, and unbuffered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope
from starlette.websockets import WebSocket

from adapter_critic import AdapterCriticMiddleware

from ..conftest import asgi_client, chat, run_server, sdk, stop_server
from ..helpers import nested
from ..middleware_app import EDIT, LocalModel, local_config

pytestmark = pytest.mark.anyio


def http_scope(method: str, path: str) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def call_asgi(app: ASGIApp, scope: Scope, chunks: list[bytes]) -> list[Message]:
    """Call `app` directly, sending the body in `chunks` (one `http.request` message each)."""
    receive = queued_receive(
        [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)]
    )
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    with anyio.fail_after(5):
        await app(scope, receive, send)
    return sent


def queued_receive(incoming: list[Message]) -> Receive:
    """A `receive` that hands out `incoming`, then waits forever (a client that neither sends nor leaves)."""
    pending = list(incoming)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


def response_body(sent: list[Message]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


# -- (a) served models run through the pipeline, stages in-process on the wrapped app -------------


async def test_served_model_runs_the_pipeline_with_stages_in_process() -> None:
    local = LocalModel()
    async with asgi_client(AdapterCriticMiddleware(local.app, config=local_config())) as client:
        response = await client.post("/v1/chat/completions", json=chat("local-adapter", "hi"))

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "local-adapter"
    assert body["choices"][0]["message"]["content"] == "reviewed from base: hi"
    intermediate = body["adapter_critic"]["intermediate"]
    assert intermediate["api_draft"] == "draft from base: hi"
    assert intermediate["adapter"] == EDIT
    # The wrapped app saw the two stage calls, never the client's own request for the served model.
    assert [(s.method, s.path, s.model) for s in local.seen] == [
        ("POST", "/v1/chat/completions", "base"),
        ("POST", "/v1/chat/completions", "reviewer"),
    ]


async def test_served_model_errors_are_answered_by_the_middleware() -> None:
    local = LocalModel()
    async with asgi_client(AdapterCriticMiddleware(local.app, config=local_config())) as client:
        response = await client.post(
            "/v1/chat/completions", json=chat("local-adapter", x_adapter_critic={"no_such_field": 1})
        )

    assert response.status_code == 400
    assert "no_such_field" in response.json()["error"]["message"]
    assert local.seen == []


async def test_messages_beside_the_chat_path_serves_anthropic_clients() -> None:
    local = LocalModel()
    payload = {"model": "local-adapter", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    async with asgi_client(AdapterCriticMiddleware(local.app, config=local_config())) as client:
        response = await client.post("/v1/messages", json=payload)
        unserved = await client.post("/v1/messages", json={**payload, "model": "base"})

    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": "reviewed from base: hi"}]
    assert response.json()["adapter_critic"]["intermediate"]["adapter"] == EDIT
    # An unserved model's /v1/messages is the wrapped app's: it has no such route, and says so its own way.
    assert (unserved.status_code, unserved.text) == (404, "Not Found")


async def test_responses_beside_the_chat_path_serves_responses_clients() -> None:
    local = LocalModel()
    payload = {"model": "local-adapter", "input": "hi"}
    async with asgi_client(AdapterCriticMiddleware(local.app, config=local_config())) as client:
        response = await client.post("/v1/responses", json=payload)
        unserved = await client.post("/v1/responses", json={**payload, "model": "base"})

    assert response.status_code == 200, response.text
    assert response.json()["object"] == "response"
    assert response.json()["output"][0]["content"][0]["text"] == "reviewed from base: hi"
    assert response.json()["adapter_critic"]["intermediate"]["adapter"] == EDIT
    assert (unserved.status_code, unserved.text) == (404, "Not Found")  # the wrapped app's own answer


async def test_served_model_body_in_chunks_runs_the_pipeline() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config())
    raw = json.dumps(chat("local-adapter", "split")).encode()
    async with LifespanManager(middleware):
        sent = await call_asgi(middleware, http_scope("POST", "/v1/chat/completions"), [raw[:10], raw[10:30], raw[30:]])

    assert json.loads(response_body(sent))["choices"][0]["message"]["content"] == "reviewed from base: split"
    assert [s.model for s in local.seen] == ["base", "reviewer"]


async def test_custom_path_is_the_one_intercepted() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config(), path="/v1/embeddings")
    async with asgi_client(middleware) as client:
        intercepted = await client.post("/v1/embeddings", json=chat("local-adapter", "hi"))
        passed = await client.post("/v1/chat/completions", json=chat("local-adapter", "hi"))

    assert intercepted.json()["choices"][0]["message"]["content"] == "reviewed from base: hi"
    assert "adapter_critic" not in passed.json()
    assert passed.json()["choices"][0]["message"]["content"] == "draft from local-adapter: hi"


# -- (b), (c) everything else reaches the wrapped app with the exact original bytes ----------------


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [
        pytest.param(
            "POST",
            "/v1/chat/completions",
            b'{ "model" :  "base",\n\t"messages": [ {"role":"user","content":"hi"} ] ,"x" : 1.50 }  \r\n',
            id="unserved-model",
        ),
        pytest.param("POST", "/v1/chat/completions", b"model=local-adapter&not json \xff\x00", id="not-json"),
        pytest.param("POST", "/v1/chat/completions", b'[ "local-adapter" ]', id="json-not-object"),
        pytest.param("POST", "/v1/chat/completions", b"", id="empty-body"),
        pytest.param("GET", "/v1/chat/completions", b"", id="get-chat-path"),
        pytest.param(
            "POST", "/v1/embeddings", b'{"model":  "local-adapter", "input" : "hi"  }\n', id="served-model-other-path"
        ),
    ],
)
async def test_other_requests_reach_the_wrapped_app_untouched(method: str, path: str, raw: bytes) -> None:
    local = LocalModel()
    async with asgi_client(AdapterCriticMiddleware(local.app, config=local_config())) as client:
        response = await client.request(method, path, content=raw)

    assert "adapter_critic" not in response.text
    assert len(local.seen) == 1
    assert (local.seen[0].method, local.seen[0].path) == (method, path)
    assert local.seen[0].body == raw


async def test_unserved_model_body_in_chunks_is_replayed_byte_for_byte() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config())
    raw = b'{"model": "base",   "messages": [{"role": "user", "content": "chunked"}]}\n'
    async with LifespanManager(middleware):
        sent = await call_asgi(middleware, http_scope("POST", "/v1/chat/completions"), [raw[:7], b"", raw[7:]])

    assert json.loads(response_body(sent))["choices"][0]["message"]["content"] == "draft from base: chunked"
    assert [s.body for s in local.seen] == [raw]


def _oversized(limit: int) -> bytes:
    raw = b'{"model": "local-adapter",  "messages": [{"role": "user", "content": "' + b"x" * limit + b'"}] }\n'
    assert len(raw) > limit
    return raw


async def test_body_over_max_body_bytes_goes_to_the_wrapped_app_untouched() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config(max_body_bytes=200))
    raw = _oversized(200)
    async with asgi_client(middleware) as client:
        small = await client.post("/v1/chat/completions", json=chat("local-adapter", "small"))
        large = await client.post("/v1/chat/completions", content=raw)

    assert "adapter_critic" in small.json()  # the same served model under the limit runs the pipeline
    assert large.status_code == 200
    assert "adapter_critic" not in large.json()
    assert large.json()["choices"][0]["message"]["content"].startswith("draft from local-adapter: xxx")
    assert local.seen[-1].body == raw


async def test_body_over_max_body_bytes_in_chunks_is_replayed_with_the_rest() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config(max_body_bytes=200))
    raw = _oversized(200)
    chunks = [raw[i : i + 64] for i in range(0, len(raw), 64)]  # the limit is passed mid-way
    async with LifespanManager(middleware):
        sent = await call_asgi(middleware, http_scope("POST", "/v1/chat/completions"), chunks)

    assert "adapter_critic" not in json.loads(response_body(sent))
    assert [s.body for s in local.seen] == [raw]


# -- (d) non-HTTP scopes ----------------------------------------------------------------------------


async def test_lifespan_reaches_the_wrapped_app_and_opens_and_closes_the_upstream_client() -> None:
    local = LocalModel()
    middleware = AdapterCriticMiddleware(local.app, config=local_config())
    upstream = middleware.service.upstream
    assert not upstream.is_open

    async with LifespanManager(middleware):
        assert local.started
        assert not local.stopped
        assert upstream.is_open

    assert local.stopped
    assert not upstream.is_open


async def test_lifespan_leaves_a_given_http_client_open() -> None:
    async with httpx.AsyncClient() as given:
        middleware = AdapterCriticMiddleware(LocalModel().app, config=local_config(), http_client=given)
        async with LifespanManager(middleware):
            assert middleware.service.upstream.is_open
        assert not middleware.service.upstream.is_open
        assert not given.is_closed


async def test_websocket_scope_reaches_the_wrapped_app() -> None:
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("from the wrapped app: " + await websocket.receive_text())
        await websocket.close()

    middleware = AdapterCriticMiddleware(Starlette(routes=[WebSocketRoute("/v1/ws", echo)]), config=local_config())
    incoming: list[Message] = [{"type": "websocket.connect"}, {"type": "websocket.receive", "text": "hello"}]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {**http_scope("GET", "/v1/ws"), "type": "websocket", "scheme": "ws", "subprotocols": []}
    with anyio.fail_after(5):
        await middleware(scope, receive, send)

    assert [m["type"] for m in sent] == ["websocket.accept", "websocket.send", "websocket.close"]
    assert sent[1]["text"] == "from the wrapped app: hello"


# -- (e) the wrapped app's streaming responses are not buffered ------------------------------------


async def test_wrapped_app_streaming_response_is_not_buffered() -> None:
    release = anyio.Event()
    first_chunk = anyio.Event()

    async def stream(request: Request) -> Response:
        await request.body()

        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: first\n\n"
            await release.wait()
            yield b"data: second\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    wrapped = Starlette(routes=[Route("/v1/chat/completions", stream, methods=["POST"])])
    middleware = AdapterCriticMiddleware(wrapped, config=local_config())
    request_body = json.dumps(chat("not-served", stream=True)).encode()
    receive = queued_receive([{"type": "http.request", "body": request_body, "more_body": False}])
    bodies: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            bodies.append(message["body"])
            first_chunk.set()

    with anyio.fail_after(5):  # a buffering middleware would never deliver the first chunk: fail, not hang
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware, http_scope("POST", "/v1/chat/completions"), receive, send)
            await first_chunk.wait()
            assert bodies == [b"data: first\n\n"]
            assert not release.is_set()
            release.set()

    assert bodies == [b"data: first\n\n", b"data: second\n\n"]


# -- through a real server ------------------------------------------------------------------------


def test_middleware_app_under_uvicorn_with_the_openai_sdk() -> None:
    with run_server(["-m", "uvicorn", "tests.middleware_app:app", "--log-level", "warning"]) as (base_url, proc):
        client = sdk(OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0))
        messages: list[Any] = [{"role": "user", "content": "hi"}]

        served = client.chat.completions.create(model="local-adapter", messages=messages)
        unserved = client.chat.completions.create(model="base", messages=messages)
        calls = httpx.get(f"{base_url}/_calls").json()
        stderr = stop_server(proc)

    assert served.choices[0].message.content == "reviewed from base: hi"
    assert served.model == "local-adapter"
    assert served.model_extra is not None
    assert served.model_extra["adapter_critic"]["intermediate"]["api_draft"] == "draft from base: hi"
    assert unserved.choices[0].message.content == "draft from base: hi"
    assert "adapter_critic" not in (unserved.model_extra or {})
    assert [c["model"] for c in calls] == ["base", "reviewer", "base"]
    # uvicorn ran the lifespan through the middleware, so the upstream client was not opened lazily.
    assert "opened on first use" not in stderr


async def test_models_lists_the_wrapped_apps_models_with_the_served_ones() -> None:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "local-base", "object": "model", "owned_by": "me"}]})

    wrapped = Starlette(routes=[Route("/v1/models", models)])
    async with asgi_client(AdapterCriticMiddleware(wrapped, config=local_config())) as client:
        listed = (await client.get("/v1/models")).json()
        served = await client.get("/v1/models/local-adapter")
        other = await client.get("/v1/models/local-base")
    # The wrapped app's own entry kept, as it was; the served models after it.
    assert listed["data"] == [
        {"id": "local-base", "object": "model", "owned_by": "me"},
        {**listed["data"][1], "id": "local-adapter", "owned_by": "adapter-critic"},
    ]
    assert served.json()["owned_by"] == "adapter-critic"
    assert other.status_code == 404  # not a served model: the wrapped app's answer (it has no such route)


async def test_models_without_a_models_route_lists_the_served_models() -> None:
    wrapped = Starlette(routes=[])
    async with asgi_client(AdapterCriticMiddleware(wrapped, config=local_config())) as client:
        listed = await client.get("/v1/models")
    assert listed.status_code == 200
    assert [model["id"] for model in listed.json()["data"]] == list(local_config().served_models)


async def test_middleware_leaves_undecidable_bodies_to_the_wrapped_app() -> None:
    seen: list[int] = []

    async def local_chat(request: Request) -> JSONResponse:
        seen.append(len(await request.body()))
        return JSONResponse({"wrapped": True}, status_code=400)

    wrapped = Starlette(routes=[Route("/v1/chat/completions", local_chat, methods=["POST"])])

    content = ('{"model": "local-adapter", "messages": ' + nested(100_000) + "}").encode()
    async with asgi_client(AdapterCriticMiddleware(wrapped, config=local_config())) as client:
        response = await client.post("/v1/chat/completions", content=content)
    assert response.json() == {"wrapped": True}
    assert seen == [len(content)]
