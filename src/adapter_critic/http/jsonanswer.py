"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`JSONAnswer`: a whole JSON body as plain ASGI — the start message and the body, nothing else; `protocol_error`:
any error as one, in a client protocol's envelope.

Every plain answer and every error of the protocol routes is one, and so are the model list, the runs API's pages
and a refused inbound key's 401. Starlette's `Response` does the same job with more on the way (its headers rebuilt
and checked on each response, a background-task hook, a `HEAD` case the POST routes never see): `python -m
benchmarks.path --plain` measures the difference per request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.types import Receive, Scope, Send

from ..errors import APIError
from ..protocols.base import Inbound

_JSON = (b"content-type", b"application/json")


class JSONAnswer:
    """`body` (JSON bytes) with `status` and `headers` (added to `content-type` and `content-length`)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, body: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.body, self.status = body, status
        self.headers = [_JSON, (b"content-length", str(len(body)).encode("ascii"))]
        if headers:
            self.headers.extend(
                (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def protocol_error(
    inbound: Inbound,
    error: APIError,
    *,
    redact: Callable[[str], str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONAnswer:
    """Any error as the `inbound` protocol's error response, with `headers` added."""
    rendered = inbound.render_error(error, redact)
    return JSONAnswer(rendered.body, rendered.status, {**rendered.headers, **(headers or {})})
