"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`build_app`: the Starlette application around a service, serving `/chat/completions`, every other registered
protocol's route (`/messages`), `/models` and `/health` (docs/reference/http.md); `http.create` makes one from a
config.

Starlette does not run a mounted app's lifespan. A host that mounts this app should enter
`app.router.lifespan_context(app)` from its own lifespan, so the upstream client is opened at
start-up and closed at shutdown; without it the client is opened on first use.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from ..protocols.base import Inbound
from ..redact import masked_logs
from ..service.compose import Service
from ..viewer import Viewer
from .auth import InboundAuth
from .catalog import api_routes
from .chat import ChatHandler
from .errorpages import error_handlers
from .fastpath import App, ASGIEndpoint
from .passthrough import Passthrough
from .stack import middleware_stack, with_auth


def build_app(service: Service, *, prefix: str = "", on_started: Callable[[], None] | None = None) -> Starlette:
    """The Starlette app around a service (`service.compose`), its routes under `prefix` (the standalone server
    uses `/v1`, and serves `/metrics` beside it).

    A service composed `standalone` has what the standalone server has by default (the viewer at `/ui`).
    `on_started` is called once the app has started (its upstream client open, its run store recording).

    One flat app rather than a `Mount`: every response passes through fewer wrappers.
    """
    config = service.config
    chat = service.chat
    handler = ChatHandler(chat, tracing=service.telemetry.tracing)
    auth = InboundAuth(service.keys)
    standalone = service.standalone
    passthrough = Passthrough(config, service.upstream, chat.policy) if config.passthrough is not None else None
    ui_on = config.ui.enabled if config.ui.enabled is not None else standalone
    viewer = Viewer(prefix) if ui_on else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Also when a host runs this lifespan from its own (a mounted app): what it logs is masked as requests are.
        with masked_logs(service.secrets):
            chat.start()
            await chat.start_recording()
        if on_started is not None:
            on_started()
        try:
            yield
        finally:
            with masked_logs(service.secrets):
                await chat.stop()  # in-flight requests finish first (shutdown_grace_seconds)

    endpoints: dict[str, ASGIApp] = {
        f"{prefix}{path}": handler if path == "/chat/completions" else _protocol_endpoint(handler, inbound, passthrough)
        for path, inbound in service.protocols.inbound.items()
    }
    app = App(
        routes=[
            *(Route(path, endpoint, methods=["POST"]) for path, endpoint in endpoints.items()),
            *api_routes(service, auth, prefix, passthrough),
            *(viewer.routes() if viewer is not None else []),
            *([Route(f"{prefix}/{{path:path}}", passthrough)] if passthrough is not None else []),
        ],
        exception_handlers=error_handlers(prefix or None),
        lifespan=lifespan,
        middleware=middleware_stack(service, auth, prefix, viewer.public_paths() if viewer is not None else []),
        secrets=service.secrets,
    )
    app.state.adapter_critic = service
    if not config.cors_allowed_origins:  # CORS headers go on every response: then only through the middleware
        app.post_routes = {path: with_auth(service, auth, prefix, endpoint) for path, endpoint in endpoints.items()}
    return app


def _protocol_endpoint(handler: ChatHandler, inbound: Inbound, passthrough: Passthrough | None) -> ASGIEndpoint:
    """A protocol's route; with a passthrough, requests for models this server does not serve are relayed to it."""
    endpoint = handler.endpoint(inbound)
    return ASGIEndpoint(endpoint if passthrough is None else passthrough.unless_served(endpoint, inbound.path))
