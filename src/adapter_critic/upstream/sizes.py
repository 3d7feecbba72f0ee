"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Reading upstream answers without unbounded buffering (`max_upstream_response_bytes`).

A non-streaming answer is read incrementally and refused as soon as it passes the limit (or at once
when its `Content-Length` says it will), so a hostile or broken upstream cannot make the server
buffer without bound. A streamed answer is counted the same way, in total, as it is relayed: an
endless event stream or an endless line without a line break ends with an error too. Sizes are of
the decoded body (after gzip), counted while decoding, a bounded piece at a time (`decoding`): what would
be held in memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from ..errors import AdapterCriticError
from .decoding import body_chunks


class ResponseTooLarge(AdapterCriticError):
    """An upstream answer passed `max_upstream_response_bytes`."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit} bytes (max_upstream_response_bytes)")
        self.limit = limit


@contextlib.asynccontextmanager
async def sent(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
    """Send a request and yield its response with the body still unread; the response is closed on exit."""
    response = await client.send(client.build_request(method, url, **kwargs), stream=True)
    try:
        yield response
    finally:
        await response.aclose()


async def read_limited(response: httpx.Response, limit: int) -> bytes:
    """The response's body, refused (`ResponseTooLarge`) as soon as it passes `limit` bytes."""
    return await read_body(response.headers, body_chunks(response), limit)


async def read_body(headers: Mapping[str, str], chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """A body read from its (decoded) `chunks`, refused (`ResponseTooLarge`) at once when its `headers` declare
    more than `limit` bytes, or as soon as it passes them."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(limit)
    parts = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(limit)
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)
