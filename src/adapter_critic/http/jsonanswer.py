"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`JSONAnswer`: a whole JSON body as plain ASGI — the start message and the body, nothing else.

Every plain answer and every error of the protocol routes is one. Starlette's `Response` does the same job with
more on the way (its headers rebuilt and checked on each response, a background-task hook, a `HEAD` case the POST
routes never see): `python -m benchmarks.path --plain` measures the difference per request.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import Receive, Scope, Send

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
