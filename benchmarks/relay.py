"""The bare relay: the floor every product figure is read against. A yardstick, not the product.

Raw ASGI; decode the body with msgspec as `dict[str, Raw]`, swap `model`, re-encode, `aiohttp.ClientSession.post`
it on one shared session, and pass the upstream's bytes through (chunk by chunk as they arrive when streaming).
This is what the product itself calls for a network upstream (`upstream/posting.py`), with nothing around it: no
validation, no run, no ids, no error handling beyond what ASGI needs. `floor.py` keeps the same relay through
httpx's API (over httpx's own transport or httpx-aiohttp).

Env: `FLOOR_UPSTREAM` (base URL, e.g. `http://127.0.0.1:8001/v1`), `FLOOR_MODEL` (the model to forward, default
`bench-api`). Run: `uvicorn benchmarks.relay:app --lifespan off`.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import msgspec

from .procs import post_body

_UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8001/v1").rstrip("/") + "/chat/completions"
_MODEL = msgspec.Raw(msgspec.json.encode(os.environ.get("FLOOR_MODEL", "bench-api")))
_HEADERS = {"content-type": "application/json"}
_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encoder = msgspec.json.Encoder()
_session: aiohttp.ClientSession | None = None


def session() -> aiohttp.ClientSession:
    """One session for the process, made on the first request (it must be made inside the running loop)."""
    global _session
    if _session is None:
        connector = aiohttp.TCPConnector(limit=256, ttl_dns_cache=None)
        _session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))
    return _session


async def app(scope: Any, receive: Any, send: Any) -> None:
    body = await post_body(scope, receive, send)
    if body is None:
        return
    fields = _decoder.decode(body)
    fields["model"] = _MODEL
    stream = fields.get("stream")
    async with session().post(_UPSTREAM, data=_encoder.encode(fields), headers=_HEADERS) as response:
        kind = response.headers.get("content-type", "application/json").encode()
        if stream is not None and bytes(stream) == b"true":
            await send({"type": "http.response.start", "status": response.status, "headers": [(b"content-type", kind)]})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        data = await response.read()
    headers = [(b"content-type", kind), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
