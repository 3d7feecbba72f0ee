"""`create_app(config)` mounted at `/v1` inside a FastAPI or a plain Starlette app (SPEC §1.1, §3).

The lifespan pattern: Starlette's `Mount` never runs a mounted app's lifespan, so the parent's own
lifespan enters the sub-app's::

    sub = adapter_critic.create_app(config)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with sub.router.lifespan_context(sub):
            yield

    parent = FastAPI(lifespan=lifespan)  # or Starlette(lifespan=lifespan, routes=[...])
    parent.mount("/v1", sub)

The upstream client is then opened at start-up and closed at shutdown. Without it the app still
works: the client is opened on first use and a warning says how to close it cleanly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from adapter_critic import create_app

from ..conftest import UPSTREAM_URL, asgi_client, chat, make_config
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio


async def hello(request: Request) -> Response:
    return JSONResponse({"parent": "hello"})


def fastapi_parent(sub: Starlette, *, forward_lifespan: bool) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with sub.router.lifespan_context(sub):
            yield

    parent = FastAPI(lifespan=lifespan) if forward_lifespan else FastAPI()
    parent.add_api_route("/hello", hello, methods=["GET"])
    parent.mount("/v1", sub)
    return parent


def starlette_parent(sub: Starlette, *, forward_lifespan: bool) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sub.router.lifespan_context(sub):
            yield

    routes = [Route("/hello", hello), Mount("/v1", app=sub)]
    return Starlette(routes=routes, lifespan=lifespan if forward_lifespan else None)


ParentFactory = Callable[..., Starlette]
PARENTS = [pytest.param(fastapi_parent, id="fastapi"), pytest.param(starlette_parent, id="starlette")]


@contextlib.asynccontextmanager
async def mounted(
    upstream: ScriptedUpstream, make_parent: ParentFactory, *, forward_lifespan: bool
) -> AsyncIterator[tuple[Starlette, Starlette, httpx.AsyncClient]]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        sub = create_app(make_config(), http_client=upstream_client)
        parent = make_parent(sub, forward_lifespan=forward_lifespan)
        async with asgi_client(parent) as client:
            yield parent, sub, client


@pytest.mark.parametrize("make_parent", PARENTS)
async def test_mounted_app_serves_every_mode_under_v1(upstream: ScriptedUpstream, make_parent: ParentFactory) -> None:
    upstream.script(
        Reply(content="draft", model="api-model"),
        Reply(content="a critique", model="critic-model"),
        Reply(content="revised", model="api-model"),
    )
    async with mounted(upstream, make_parent, forward_lifespan=True) as (_, _, client):
        critic = await client.post("/v1/chat/completions", json=chat("m-critic", "hi"))
        direct = await client.post("/v1/chat/completions", json=chat("m-direct", "hi"))
        models = await client.get("/v1/models")
        health = await client.get("/v1/health")
        own = await client.get("/hello")
        unknown = await client.get("/v1/nope")

    assert critic.status_code == 200, critic.text
    assert critic.json()["choices"][0]["message"]["content"] == "revised"
    assert critic.json()["adapter_critic"]["intermediate"]["critic"] == "a critique"
    assert direct.json()["choices"][0]["message"]["content"] == "echo api-model: hi"
    assert [c.model for c in upstream.calls] == ["api-model", "critic-model", "api-model", "api-model"]
    assert all(c.url.startswith(UPSTREAM_URL) for c in upstream.calls)
    assert [m["id"] for m in models.json()["data"]] == ["m-direct", "m-adapter", "m-critic"]
    assert health.json() == {"status": "ok"}
    assert own.json() == {"parent": "hello"}  # the parent's own routes are unaffected
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("make_parent", PARENTS)
async def test_parent_lifespan_opens_and_closes_the_upstream_client(
    upstream: ScriptedUpstream, make_parent: ParentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async with mounted(upstream, make_parent, forward_lifespan=True) as (_, sub, client):
        service = sub.state.adapter_critic
        assert service.upstream.is_open  # opened at start-up, before any request
        response = await client.post("/v1/chat/completions", json=chat("m-direct"))
        assert response.status_code == 200

    assert not service.upstream.is_open  # closed when the parent's lifespan exited
    assert "opened on first use" not in caplog.text


@pytest.mark.parametrize("make_parent", PARENTS)
async def test_without_the_parent_lifespan_the_client_opens_lazily_with_a_warning(
    upstream: ScriptedUpstream, make_parent: ParentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="adapter_critic")
    async with mounted(upstream, make_parent, forward_lifespan=False) as (_, sub, client):
        service = sub.state.adapter_critic
        assert not service.upstream.is_open  # Mount did not run the sub-app's lifespan
        first = await client.post("/v1/chat/completions", json=chat("m-direct", "one"))
        second = await client.post("/v1/chat/completions", json=chat("m-direct", "two"))
        assert service.upstream.is_open

    assert first.json()["choices"][0]["message"]["content"] == "echo api-model: one"
    assert second.json()["choices"][0]["message"]["content"] == "echo api-model: two"
    warnings = [r for r in caplog.records if "opened on first use" in r.getMessage()]
    assert len(warnings) == 1  # said once, not on every request
    assert "lifespan_context" in warnings[0].getMessage()
    assert service.upstream.is_open  # nobody closed it: the reason to forward the lifespan
    await service.upstream.aclose()
