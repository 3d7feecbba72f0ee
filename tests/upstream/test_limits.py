"""`max_upstream_response_bytes`: an upstream answer, plain or streamed, is read up to the limit and refused past it —
endless, declared too long or within it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from ..conftest import chat, make_config
from ..helpers import completion, envelope, hostile

pytestmark = pytest.mark.anyio


async def endless(piece: bytes = b" " * 65536) -> AsyncIterator[bytes]:
    while True:
        yield piece
        await anyio.lowlevel.checkpoint()


async def test_endless_upstream_body_is_refused_not_buffered() -> None:
    sizes: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            # An event stream that never sends a line break: nothing to relay, nothing to end the line.
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=endless(b"data: x" * 9000)
            )
        return httpx.Response(200, headers={"content-type": "application/json"}, content=endless())

    config = make_config(max_upstream_response_bytes=1024 * 1024)
    async with hostile(config, handler) as client:
        for stream in (False, True):
            with anyio.fail_after(10):
                response = await client.post("/chat/completions", json=chat("m-direct", stream=stream))
            error = envelope(response, 502)
            sizes.append(error["message"])
            assert "max_upstream_response_bytes" in error["message"] and "api stage" in error["message"]


async def test_declared_oversized_upstream_body_is_refused_unread() -> None:
    reads = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal reads
        reads += 1
        yield json.dumps(completion()).encode()

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-length": str(10**9), "content-type": "application/json"}, content=body()
        )

    async with hostile(make_config(), handler) as client:
        error = envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)
    assert "max_upstream_response_bytes" in error["message"]
    assert reads == 0


async def test_upstream_body_within_the_limit_is_fine() -> None:
    content = "y" * 5000

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion(content))

    size = len(json.dumps(completion(content)))
    async with hostile(make_config(max_upstream_response_bytes=size + 10), handler) as client:
        response = await client.post("/chat/completions", json=chat("m-direct"))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == content
