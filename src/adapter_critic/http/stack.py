"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What wraps the app's routes: request ids, CORS (outermost but for them: a browser's preflight carries no key) and
inbound auth, each protocol's route answering a refusal in its own envelope.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from ..protocols.base import Inbound
from ..service.compose import Service
from .auth import AuthMiddleware, InboundAuth
from .count_tokens import HEADER as TOKEN_COUNT_HEADER
from .requestid import RequestIdMiddleware

# The limits' headers (`limits.gate.rate_headers`), readable by a browser's script under CORS.
_RATE_HEADERS = [
    f"x-ratelimit-{what}-{kind}" for what in ("limit", "remaining", "reset") for kind in ("requests", "tokens")
]


def with_auth(service: Service, auth: InboundAuth, prefix: str, endpoint: ASGIApp) -> ASGIApp:
    """`endpoint` behind inbound auth when it is on (as the middleware stack puts it there for every route)."""
    if not auth.enabled:
        return endpoint
    return AuthMiddleware(endpoint, auth=auth, routes=protocol_routes(service, prefix))


def protocol_routes(service: Service, prefix: str) -> dict[str, Inbound]:
    """Each protocol's route path (under `prefix`) and its protocol, for inbound auth's errors in its envelope."""
    return {f"{prefix}{path}": inbound for path, inbound in service.protocols.inbound.items()}


def middleware_stack(service: Service, auth: InboundAuth, prefix: str, public: list[str]) -> list[Middleware]:
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
        routes = protocol_routes(service, prefix)
        stack.append(Middleware(AuthMiddleware, auth=auth, public_paths=public_paths, routes=routes))
    return stack
