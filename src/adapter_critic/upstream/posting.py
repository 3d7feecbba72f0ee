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

from .decoding import body_chunks
from .pinning import PINNED
from .sizes import sent
from .transport import AiohttpTransport

__all__ = ["Opened", "posted", "read_some"]

# (status, the answer's headers, its body as decoded chunks)
Opened = tuple[int, Mapping[str, str], AsyncIterator[bytes]]


def posted(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    content: bytes,
    timeouts: httpx.Timeout,
    pinned: tuple[str, ...] = (),
    direct: AiohttpTransport | None = None,
) -> contextlib.AbstractAsyncContextManager[Opened]:
    """POST `content` to `url`: over `direct` when given (the transport under `client`, which decodes the body
    itself: no context manager of ours around its own), else through `client` (its requests to a pinned target
    carry the addresses). The answer is closed on exit."""
    if direct is not None:
        return direct.post(url, headers, content, timeouts)
    return _through_httpx(client, url, headers=headers, content=content, timeouts=timeouts, pinned=pinned)


@contextlib.asynccontextmanager
async def _through_httpx(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    content: bytes,
    timeouts: httpx.Timeout,
    pinned: tuple[str, ...],
) -> AsyncIterator[Opened]:
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
