"""Request ids: every response carries `x-request-id`.

An inbound `x-request-id` of sane length and charset (1 to 128 of `A-Z a-z 0-9 . _ : @ / + = -`, starting with a
letter or digit) is kept; otherwise the request's run id is used (`chatcmpl-…`, also the response's `id` and the
extension's `run_id`). The id is bound once per request (`bind`), kept in the ASGI scope, and every line a run
logs carries it.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .responses import new_completion_id

HEADER = b"x-request-id"
_SCOPE_KEY = "adapter_critic.request_id"
_SANE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


def bind(scope: Scope) -> tuple[str, str]:
    """The request's `(request_id, run_id)`, made on first use and kept in `scope`: the run id is always new (runs
    are stored by it); the request id is the client's own when it sent a sane one, else the run id."""
    bound: tuple[str, str] | None = scope.get(_SCOPE_KEY)
    if bound is None:
        run_id = new_completion_id()
        request_id = run_id
        for name, value in scope.get("headers", ()):
            if name == HEADER:
                if _SANE.fullmatch(value):
                    request_id = value.decode("ascii")
                break
        bound = scope[_SCOPE_KEY] = (request_id, run_id)
    return bound


def with_header(send: Send, request_id: str) -> Send:
    """`send` adding `x-request-id` to the response's headers (unless the app set one)."""
    value = request_id.encode("ascii")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            if not any(name.lower() == HEADER for name, _ in headers):
                headers.append((HEADER, value))
                message = {**message, "headers": headers}
        await send(message)

    return sending


class RequestIdMiddleware:
    """Pure ASGI: binds each HTTP request's id and puts it in the `x-request-id` header of its response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id, _ = bind(scope)
        await self.app(scope, receive, with_header(send, request_id))
