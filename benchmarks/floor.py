"""The floor: the least a Python ASGI proxy can do for a chat completion. A yardstick, not the product.

Raw ASGI; decode the body with msgspec as `dict[str, Raw]`, swap `model`, re-encode, forward with one shared
`httpx.AsyncClient`, and return the upstream's bytes (relayed chunk by chunk when streaming). No validation, no
error handling beyond what ASGI needs.

Env: `FLOOR_UPSTREAM` (base URL, e.g. `http://127.0.0.1:8001/v1`), `FLOOR_TRANSPORT` (`httpx` for httpx's default
transport, `aiohttp` for `httpx_aiohttp.AiohttpTransport`), `FLOOR_MODEL` (the model to forward, default
`bench-api`). Run: `uvicorn benchmarks.floor:app --lifespan off`.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import msgspec

from .procs import post_body

_UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8001/v1").rstrip("/") + "/chat/completions"
_MODEL = msgspec.Raw(msgspec.json.encode(os.environ.get("FLOOR_MODEL", "bench-api")))
_HEADERS = {"content-type": "application/json"}
_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=256)


def make_client(transport: str) -> httpx.AsyncClient:
    if transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        return httpx.AsyncClient(transport=AiohttpTransport(limits=_LIMITS), timeout=30.0)
    if transport == "httpx":
        return httpx.AsyncClient(limits=_LIMITS, timeout=30.0)
    raise ValueError(f"FLOOR_TRANSPORT must be httpx or aiohttp, not {transport!r}")


_client = make_client(os.environ.get("FLOOR_TRANSPORT", "httpx"))
_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encoder = msgspec.json.Encoder()


async def app(scope: Any, receive: Any, send: Any) -> None:
    body = await post_body(scope, receive, send)
    if body is None:
        return
    fields = _decoder.decode(body)
    fields["model"] = _MODEL
    content = _encoder.encode(fields)
    stream = fields.get("stream")
    if stream is not None and bytes(stream) == b"true":
        request = _client.build_request("POST", _UPSTREAM, content=content, headers=_HEADERS)
        response = await _client.send(request, stream=True)
        try:
            headers = [(b"content-type", response.headers.get("content-type", "text/event-stream").encode())]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
        return
    response = await _client.post(_UPSTREAM, content=content, headers=_HEADERS)
    data = response.content
    headers = [
        (b"content-type", response.headers.get("content-type", "application/json").encode()),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": data})
