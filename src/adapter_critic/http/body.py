"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What is checked of a request before its run: the body read within `max_body_bytes` (413 past it), and `n`
for a workflow that answers with one choice (400)."""

from __future__ import annotations

from starlette.types import Receive, Scope

from ..errors import RequestError


def body_too_large(limit: int) -> RequestError:
    return RequestError(
        f"The request body is larger than this server's limit of {limit} bytes (max_body_bytes).",
        status_code=413,
        code="request_too_large",
    )


def declared_too_large(scope: Scope, limit: int) -> bool:
    """The request's `Content-Length` says its body is over `limit`: refused before a byte of it is read."""
    for name, value in scope["headers"]:  # noqa: SIM110 (a plain loop: it runs for every request)
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            return True
    return False


async def read_body(receive: Receive, limit: int) -> bytes:
    """Read an HTTP request body, refusing (413) as soon as it passes `limit` rather than buffering it whole."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
