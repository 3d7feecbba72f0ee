"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`create_app`: the Starlette application serving `/chat/completions`, every other registered protocol's
route (`/messages`), `/models` and `/health` (docs/reference/http.md).

Starlette does not run a mounted app's lifespan. A host that mounts this app should enter
`app.router.lifespan_context(app)` from its own lifespan, so the upstream client is opened at
start-up and closed at shutdown; without it the client is opened on first use.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..config import Config, load_config, require_absolute_urls
from ..errors import RequestError, ServerError
from ..observe.logs import served_line
from ..pipeline.resolve import unknown_model, why_not_served
from ..protocols.base import Inbound
from ..protocols.openai.render import JSON, encode, error_response
from ..redact import masked_logs
from ..service.compose import Service, compose
from ..store.settings import default_url
from ..upstream.pinning import HostGuard, Resolver
from ..upstream.retry import Sleep
from ..viewer import Viewer
from .auth import CALLER, AuthMiddleware, InboundAuth
from .chat import ChatHandler
from .count_tokens import HEADER as TOKEN_COUNT_HEADER
from .count_tokens import count_tokens_routes
from .fastpath import App, ASGIEndpoint
from .health import DeepHealth
from .keys import keys_routes
from .models import model_object
from .passthrough import Passthrough
from .requestid import RequestIdMiddleware
from .runs import RunsAPI
from .telemetry import metrics_endpoint

logger = logging.getLogger("adapter_critic")

_HEALTH = encode({"status": "ok"})
# The limits' headers (`quota.gate.rate_headers`), readable by a browser's script under CORS.
_RATE_HEADERS = [
    f"x-ratelimit-{what}-{kind}" for what in ("limit", "remaining", "reset") for kind in ("requests", "tokens")
]


def create_app(
    config: Config | str | Path,
    *,
    http_client: httpx.AsyncClient | None = None,
    sleep: Sleep | None = None,
    resolver: Resolver | None = None,
    clock: Callable[[], float] | None = None,
) -> Starlette:
    """Build the adapter_critic ASGI app.

    Parameters:
        config: a `Config`, or the path of a `.toml`/`.json`/`.yaml` config file.
        http_client: an `httpx.AsyncClient` to use for upstream calls instead of the app's own
            (it is not closed by the app). Calls to override URLs that only `allowed_override_base_urls = ["*"]`
            allows still go through the app's own client, which connects to the addresses it checked.
        sleep: the async function that waits between retries (default `anyio.sleep`; tests pass one that
            records the waits instead).
        resolver: the async function `(host, port) -> addresses` that resolves such override URLs' host names
            (default: the system's resolver; tests pass one that answers without the network).
        clock: what tells the limits' windows the time, in Unix seconds (default `time.time`; tests pass one they
            move).

    Every `base_url` must be absolute; relative ones only work with `AdapterCriticMiddleware`.
    """
    config = _absolute(config)
    guard = HostGuard(resolver, timeout=config.connect_timeout_seconds) if resolver is not None else None
    return build_app(compose(config, http_client=http_client, sleep=sleep, host_guard=guard, clock=clock or time.time))


def create_standalone_app(config: Config | str | Path, *, on_started: Callable[[], None] | None = None) -> Starlette:
    """`create_app` with its routes under `/v1` and the standalone server's defaults, as
    `uvicorn adapter_critic.asgi:app` serves them."""
    service = compose(_absolute(config), standalone=True, store_default=default_url())
    return build_app(service, prefix="/v1", on_started=on_started)


def _absolute(config: Config | str | Path) -> Config:
    """The config (loaded from its file if a path), refused if a `base_url` is relative."""
    if not isinstance(config, Config):
        config = load_config(config)
    require_absolute_urls(config)
    return config


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
    created = int(time.time())
    model_objects = {served_id: model_object(served_id, created) for served_id in config.served_models}
    models_body = encode({"object": "list", "data": list(model_objects.values())})
    model_bodies = {served_id: encode(model) for served_id, model in model_objects.items()}

    passthrough = Passthrough(config, service.upstream, chat.policy) if config.passthrough is not None else None
    ui_on = config.ui.enabled if config.ui.enabled is not None else standalone
    viewer = Viewer(prefix) if ui_on else None

    policy = chat.policy  # a key with `models` sees only those (docs/guides/security.md#tenants)

    async def models(request: Request) -> Response:
        caller = request.scope.get(CALLER)
        if policy.bounded(caller):  # its own served models only: the passthrough's are not for it
            own = [model_objects[served_id] for served_id in policy.visible(caller, model_objects)]
            return Response(encode({"object": "list", "data": own}), media_type=JSON)
        if passthrough is None:
            return Response(models_body, media_type=JSON)
        merged = await passthrough.models(list(model_objects.values()))
        return Response(encode({"object": "list", "data": merged}), media_type=JSON)

    async def model(scope: Scope, receive: Receive, send: Send) -> None:
        served_id: str = scope["path_params"]["model"]
        caller = scope.get(CALLER)
        allowed = not policy.any_bounds or policy.allows(caller, served_id)
        body = model_bodies.get(served_id) if allowed else None
        if body is None and allowed and config.serves(served_id):  # a prefixed model (`[models]`): never listed
            body = encode(model_object(served_id, created))
        if body is not None:
            await Response(body, media_type=JSON)(scope, receive, send)
        elif passthrough is not None and not config.serves(served_id) and not passthrough.bounded(scope):
            await passthrough.relay(scope, receive, send, f"/models/{served_id}")
        else:
            reason = why_not_served(config, served_id) if allowed else None
            error = unknown_model(served_id, policy.visible(caller, config.served_models), reason=reason)
            await error_response(error, redact=service.secrets.redact)(scope, receive, send)

    deep_health = DeepHealth(config, service.upstream)
    metrics = metrics_endpoint(service.telemetry)
    metrics_path = f"{'' if standalone else prefix}{config.telemetry.metrics_path}"

    async def health(request: Request) -> Response:
        if request.query_params.get("deep", "") in ("", "0", "false"):
            return Response(_HEALTH, media_type=JSON)
        # `/health` is public under inbound auth; the deep check calls upstreams, so it needs the key.
        refused = auth.check(request.scope)
        if refused is not None:
            return error_response(refused)
        return Response(encode(await deep_health.report()), media_type=JSON)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Also when a host runs this lifespan from its own (a mounted app): what it logs is masked as requests are.
        with masked_logs(service.secrets):
            logger.info(served_line(config))
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
            Route(f"{prefix}/models", models, methods=["GET"]),
            Route(f"{prefix}/models/{{model:path}}", ASGIEndpoint(model), methods=["GET"]),
            Route(f"{prefix}/health", health, methods=["GET"]),
            *count_tokens_routes(service, prefix, passthrough),
            *runs_routes(service, prefix, auth),
            *keys_routes(service, prefix),
            *([Route(metrics_path, ASGIEndpoint(metrics), methods=["GET"])] if metrics is not None else []),
            *(viewer.routes() if viewer is not None else []),
            *([Route(f"{prefix}/{{path:path}}", passthrough)] if passthrough is not None else []),
        ],
        exception_handlers=error_handlers(prefix or None),
        lifespan=lifespan,
        middleware=_middleware(service, auth, prefix, viewer.public_paths() if viewer is not None else []),
        secrets=service.secrets,
    )
    app.state.adapter_critic = service
    if not config.cors_allowed_origins:  # CORS headers go on every response: then only through the middleware
        app.post_routes = {path: _with_auth(service, auth, prefix, endpoint) for path, endpoint in endpoints.items()}
    return app


def _with_auth(service: Service, auth: InboundAuth, prefix: str, endpoint: ASGIApp) -> ASGIApp:
    """`endpoint` behind inbound auth when it is on (as the middleware stack puts it there for every route)."""
    if not auth.enabled:
        return endpoint
    return AuthMiddleware(endpoint, auth=auth, routes=_protocol_routes(service, prefix))


def _protocol_routes(service: Service, prefix: str) -> dict[str, Inbound]:
    """Each protocol's route path (under `prefix`) and its protocol, for inbound auth's errors in its envelope."""
    return {f"{prefix}{path}": inbound for path, inbound in service.protocols.inbound.items()}


def _protocol_endpoint(handler: ChatHandler, inbound: Inbound, passthrough: Passthrough | None) -> ASGIEndpoint:
    """A protocol's route; with a passthrough, requests for models this server does not serve are relayed to it."""
    endpoint = handler.endpoint(inbound)
    return ASGIEndpoint(endpoint if passthrough is None else passthrough.unless_served(endpoint, inbound.path))


def runs_routes(service: Service, prefix: str, auth: InboundAuth) -> list[Route]:
    """`GET {prefix}/runs…` (the runs API) and `POST {prefix}/runs/{id}/feedback` when the service records runs and
    `store.api` is on."""
    if service.store is None or not service.config.store.api:
        return []
    api = RunsAPI(lambda: service.store, auth, service.on_feedback)

    async def runs(scope: Scope, receive: Receive, send: Send) -> None:
        await api.dispatch(scope, receive, send, scope["path_params"]["rest"])

    return [Route(f"{prefix}/runs{{rest:path}}", ASGIEndpoint(runs), methods=["GET", "POST"])]


def _middleware(service: Service, auth: InboundAuth, prefix: str, public: list[str]) -> list[Middleware]:
    """CORS outermost (a browser's preflight carries no API key), then inbound auth — inside Starlette's error
    middleware but before routing, so 404s and 405s need the key too."""
    stack = [Middleware(RequestIdMiddleware)]
    origins = service.config.cors_allowed_origins
    if origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=[
                    "authorization",
                    "content-type",
                    "x-api-key",
                    "x-request-id",
                    "openai-organization",
                    "anthropic-version",
                    "anthropic-beta",
                ],
                expose_headers=["x-request-id", "retry-after", "x-should-retry", TOKEN_COUNT_HEADER, *_RATE_HEADERS],
                max_age=600,
            )
        )
    if auth.enabled:
        public_paths = [f"{prefix}/health", *public]
        routes = _protocol_routes(service, prefix)
        stack.append(Middleware(AuthMiddleware, auth=auth, public_paths=public_paths, routes=routes))
    return stack


def error_handlers(prefix: str | None = None) -> dict[Any, Any]:
    """Starlette exception handlers answering 404/405/500 in the OpenAI envelope.

    `prefix` is where the API routes live, for the 404 message (default: the mount's `root_path`).
    """

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            root = request.scope.get("root_path", "") if prefix is None else prefix
            message = (
                f"Unknown path {request.url.path!r}. This server serves POST {root}/chat/completions, "
                f"POST {root}/messages, POST {root}/responses, GET {root}/models and GET {root}/health."
            )
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path!r}."
        else:
            message = str(exc.detail)
        error = RequestError(message, status_code=exc.status_code)
        return error_response(error, headers=exc.headers)

    return {HTTPException: http_error, Exception: _unexpected_error}


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServerError("Internal server error; see the server log."))
