"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

One POST to an upstream, on the cheapest path its client allows, read back as (status, headers, body chunks).

- The shared network client over aiohttp: straight through its aiohttp session (`AiohttpTransport.post`), no
  httpx request or response built.
- Any other httpx client (one the host gave, the pinning client, httpx's own transport, the in-process one):
  httpx's streaming call.

Either way the body chunks come decoded a bounded piece at a time (`decoding`) and every failure is an httpx
exception (or `UndecodableAnswer`), so callers read both alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import httpx

from .decoding import body_chunks, decoded
from .limits import sent
from .pinning import PINNED
from .transport import AiohttpTransport

__all__ = ["Opened", "posted", "read_some"]

# (status, the answer's headers, its body as decoded chunks)
Opened = tuple[int, Mapping[str, str], AsyncIterator[bytes]]


@contextlib.asynccontextmanager
async def posted(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    content: bytes,
    timeouts: httpx.Timeout,
    pinned: tuple[str, ...] = (),
    direct: AiohttpTransport | None = None,
) -> AsyncIterator[Opened]:
    """POST `content` to `url`: over `direct` when given (the transport under `client`), else through `client`
    (its requests to a pinned target carry the addresses). The answer is closed on exit."""
    if direct is not None:
        async with direct.post(url, headers, content, timeouts) as (status, answer_headers, raw):
            yield status, answer_headers, decoded(answer_headers.get("content-encoding"), raw)
        return
    extensions = {PINNED: pinned} if pinned else None
    opened = sent(client, "POST", url, content=content, headers=headers, timeout=timeouts, extensions=extensions)
    async with opened as response:
        yield response.status_code, response.headers, body_chunks(response)


async def read_some(chunks: AsyncIterator[bytes], limit: int = 65536) -> bytes:
    """An error body, read up to `limit` bytes (it is only shown, never relayed whole)."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit])
