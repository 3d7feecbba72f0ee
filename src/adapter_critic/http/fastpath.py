"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`App`: the Starlette app whose protocols' POST routes (`/chat/completions`, `/messages`, `/responses`) are
answered ahead of Starlette's middleware stack and router.

Those routes are most of a server's traffic, and every wrapper around them is paid again for each streamed
chunk: Starlette's error middleware, its exception middleware and the request-id middleware each wrap `send`.
Here one wrapper adds `x-request-id` and notes whether the response started, inbound auth runs as on every other
route (`AuthMiddleware`, which leaves `send` alone), and an unexpected error is logged and answered with the
same 500 envelope Starlette's handler would give. Every other request, and every request when CORS is on (its
headers go on every response), goes through Starlette as before.

Everything the app runs, its lifespan included, logs with its own secrets masked (`redact.masked_logs`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ServerError
from ..protocols.openai.render import error_response
from ..redact import Secrets, masked_logs
from .auth import route_path
from .requestid import with_request_id

logger = logging.getLogger("adapter_critic")


class App(Starlette):
    """Starlette, with `post_routes` (route path -> plain ASGI endpoint) answered before its middleware."""

    post_routes: Mapping[str, ASGIApp] = MappingProxyType({})

    def __init__(self, *args: Any, secrets: Secrets | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets = secrets if secrets is not None else Secrets(())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with masked_logs(self.secrets):
            if scope["type"] == "http" and scope["method"] == "POST" and self.post_routes:
                endpoint = self.post_routes.get(route_path(scope))
                if endpoint is not None:
                    scope["app"] = self
                    await answer(endpoint, scope, receive, send)
                    return
            await super().__call__(scope, receive, send)


class ASGIEndpoint:
    """A plain ASGI function as a route endpoint (Starlette treats a function endpoint as request -> response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


async def answer(endpoint: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """`endpoint`'s answer with the request's `x-request-id`; an unexpected error is logged and, when nothing was
    sent yet, answered with a 500 envelope."""
    started = False

    def sending(message: Message) -> Awaitable[None]:  # the server's own `send` is awaited: no frame more per chunk
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
            message = with_request_id(message, scope)
        return send(message)

    try:
        await endpoint(scope, receive, sending)
    except Exception:
        logger.exception("unexpected error on POST %s", scope["path"])
        if not started:
            await error_response(ServerError("Internal server error; see the server log."))(scope, receive, sending)
