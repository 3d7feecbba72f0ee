"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Inbound auth over HTTP: where a request's key is (`Authorization: Bearer <key>`, or on a protocol's route the header
its clients send: `x-api-key` for Anthropic's `/messages`), and the refusal in the route's envelope. Which keys are
accepted, and whose a key is, is the service's key ring (`service.keys`). When auth is on, every request but
`/health` needs a key; the named key that matched is put in the request's scope (`CALLER`), where the service finds
the caller's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import AuthenticationError
from ..protocols.base import Inbound, bearer_token
from ..protocols.openai import INBOUND as OPENAI
from ..service.keys import KeyRing
from .jsonanswer import JSONAnswer, protocol_error

PUBLIC_PATHS = ("/health",)
CALLER = "adapter_critic.caller"  # scope key: the name of the named key a request was let in with

# A token we may put in an upstream's `Authorization` header: visible ASCII, no spaces (RFC 6750's b64token, loosely).
_FORWARDABLE = re.compile(rb"[\x21-\x7e]+")


def client_token(scope: Scope, credential: Callable[[Scope], bytes | None] | None = None) -> str | None:
    """The caller's API key (its bearer token, or what `credential` finds) in a form that can be forwarded
    upstream (`forward_client_authorization`)."""
    token = (credential or bearer_token)(scope)
    if token is None or not _FORWARDABLE.fullmatch(token):
        return None
    return token.decode("ascii")


class InboundAuth:
    """The inbound API-key check of one app or middleware: the token found where the route's protocol's clients
    send it, the caller identified by the service's key ring (`service.keys`)."""

    def __init__(self, keys: KeyRing) -> None:
        self.keys = keys

    @property
    def enabled(self) -> bool:
        return self.keys.enabled

    @property
    def admins(self) -> frozenset[str]:
        return self.keys.admins

    def check(self, scope: Scope, inbound: Inbound | None = None) -> AuthenticationError | None:
        """None if the request may pass (the named key's name put in the scope, `CALLER`), else the 401 to answer.

        The key is looked for where the `inbound` protocol's clients send it (default: `Authorization: Bearer`)."""
        if not self.keys.enabled:
            return None
        token = bearer_token(scope) if inbound is None else inbound.credential(scope)
        hint = "an `Authorization: Bearer <key>` header" if inbound is None else inbound.key_hint
        found = self.keys.identify(token, hint)
        if isinstance(found, AuthenticationError):
            return found
        if found is not None:
            scope[CALLER] = found
        return None


class AuthMiddleware:
    """Pure ASGI: refuse HTTP requests without an accepted API key (401), except those to `public_paths`.

    Paths are compared relative to the app's mount point (`root_path`), so `/health` also matches a
    mounted `/v1/health`. A path in `routes` is a protocol's route (or lies under one): the key is looked for
    where its clients send it, and a refusal is in its error envelope. Lifespan and other non-HTTP scopes pass through.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: InboundAuth,
        public_paths: Iterable[str] = PUBLIC_PATHS,
        routes: Mapping[str, Inbound] | None = None,
    ) -> None:
        self.app = app
        self.auth = auth
        self.public_paths = frozenset(public_paths)
        self.routes = dict(routes or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            if path not in self.public_paths:
                inbound = self.routes.get(path) or _route_above(self.routes, path)
                error = self.auth.check(scope, inbound)
                if error is not None:
                    await refusal(error, inbound)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _route_above(routes: Mapping[str, Inbound], path: str) -> Inbound | None:
    """The protocol of the route `path` lies under (`/messages/count_tokens`: Anthropic's), if any."""
    return next((inbound for route, inbound in routes.items() if path.startswith(route + "/")), None)


def refusal(error: AuthenticationError, inbound: Inbound | None) -> JSONAnswer:
    """The 401 in the envelope of the route's protocol (OpenAI's when the path is no protocol's route)."""
    return protocol_error(inbound or OPENAI, error)


def route_path(scope: Scope) -> str:
    """The request path below the app's mount point."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path
