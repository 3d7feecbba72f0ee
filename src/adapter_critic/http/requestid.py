"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Request ids: every response carries `x-request-id`.

An inbound `x-request-id` of sane length and charset (1 to 128 of `A-Z a-z 0-9 . _ : @ / + = -`, starting with a
letter or digit) is kept; otherwise the request's run id is used (the response's `id` and the extension's
`run_id`: `chatcmpl-…`, or the client protocol's own form, `msg_…`, `resp_…`). The id is bound once per request
(`bind`, by the service when it answers, else when the response starts), kept in the ASGI scope, and every line
a run logs carries it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..protocols.openai.render import new_completion_id

HEADER = b"x-request-id"
_SCOPE_KEY = "adapter_critic.request_id"
_SANE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


def bind(scope: Scope, new_id: Callable[[], str] = new_completion_id) -> tuple[str, str]:
    """The request's `(request_id, run_id)`, made on first use and kept in `scope`: the run id is always new (runs
    are stored by it; `new_id` makes it in the client protocol's form); the request id is the client's own when
    it sent a sane one, else the run id."""
    bound: tuple[str, str] | None = scope.get(_SCOPE_KEY)
    if bound is None:
        run_id = new_id()
        request_id = run_id
        for name, value in scope.get("headers", ()):
            if name == HEADER:
                if _SANE.fullmatch(value):
                    request_id = value.decode("ascii")
                break
        bound = scope[_SCOPE_KEY] = (request_id, run_id)
    return bound


def with_header(send: Send, scope: Scope) -> Send:
    """`send` adding the request's `x-request-id` to the response's headers (unless the app set one)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = with_request_id(message, scope)
        await send(message)

    return sending


def with_request_id(start: Message, scope: Scope) -> Message:
    """A response's start message with the request's `x-request-id` (bound now if nothing bound it yet)."""
    headers = list(start.get("headers", ()))
    if any(name.lower() == HEADER for name, _ in headers):
        return start
    headers.append((HEADER, bind(scope)[0].encode("ascii")))
    return {**start, "headers": headers}


class RequestIdMiddleware:
    """Pure ASGI: binds each HTTP request's id and puts it in the `x-request-id` header of its response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, with_header(send, scope))
