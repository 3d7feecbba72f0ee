"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Inbound auth (`auth_api_keys_env`): who may call this server.

Off unless the config names an env var. When on, every request but `/health` needs
`Authorization: Bearer <key>` (or, on a protocol's route, the header its clients send: `x-api-key` for
Anthropic's `/messages`) with one of the comma-separated keys in that env var, which is read on
every request so keys rotate without a restart. The presented token is compared with every accepted
key in constant time (digests of equal length, no early exit).

Named keys (`[[auth.keys]]`, docs/guides/quotas.md) are checked the same way, beside those; the one that matched
is put in the request's scope (`CALLER`), where the limits and the run store find the caller's name.

An unset or empty env var fails closed: every request but `/health` is refused (401) and a warning is
logged, rather than the server silently becoming open to anyone.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from ..config.limits import AuthKey
from ..errors import AuthenticationError
from ..protocols.base import Inbound, bearer_token
from ..protocols.openai import INBOUND as OPENAI
from .jsonanswer import JSONAnswer, protocol_error

logger = logging.getLogger("adapter_critic")

PUBLIC_PATHS = ("/health",)
CALLER = "adapter_critic.caller"  # scope key: the name of the named key a request was let in with

# A token we may put in an upstream's `Authorization` header: visible ASCII, no spaces (RFC 6750's b64token, loosely).
_FORWARDABLE = re.compile(rb"[\x21-\x7e]+")
_CHALLENGE = {"www-authenticate": "Bearer"}


def client_token(scope: Scope, credential: Callable[[Scope], bytes | None] | None = None) -> str | None:
    """The caller's API key (its bearer token, or what `credential` finds) in a form that can be forwarded
    upstream (`forward_client_authorization`)."""
    token = (credential or bearer_token)(scope)
    if token is None or not _FORWARDABLE.fullmatch(token):
        return None
    return token.decode("ascii")


class InboundAuth:
    """The inbound API-key check for one app or middleware; no `env_name` and no `keys` means auth is off."""

    def __init__(self, env_name: str | None, keys: Sequence[AuthKey] = ()) -> None:
        self.env_name = env_name
        self.keys = tuple(keys)
        self.admins = frozenset(key.name for key in keys if key.admin)
        self._hashed = [(bytes.fromhex(k.key_sha256), k.name) for k in keys if k.key_sha256 is not None]
        self._warned = False
        if self.enabled and not self._digests():
            self._warn_unconfigured()

    @property
    def enabled(self) -> bool:
        return self.env_name is not None or bool(self.keys)

    def check(self, scope: Scope, inbound: Inbound | None = None) -> AuthenticationError | None:
        """None if the request may pass, else the 401 to answer. Never says which key, or how close.

        The key is looked for where the `inbound` protocol's clients send it (default: `Authorization: Bearer`)."""
        if not self.enabled:
            return None
        accepted = self._digests()
        if not accepted:
            self._warn_unconfigured()
            return AuthenticationError(
                "This server requires an API key, but has no accepted keys configured; ask its operator.",
                code="invalid_api_key",
                headers=_CHALLENGE,
            )
        self._warned = False
        token = bearer_token(scope) if inbound is None else inbound.credential(scope)
        if token is None:
            hint = "an `Authorization: Bearer <key>` header" if inbound is None else inbound.key_hint
            return AuthenticationError(
                f"Missing API key: send it in {hint}.",
                code="invalid_api_key",
                headers=_CHALLENGE,
            )
        presented = hashlib.sha256(token).digest()
        matched = False
        caller = None
        for digest, name in accepted:  # every key, always: the time taken must not depend on which one matched
            equal = hmac.compare_digest(presented, digest)
            matched |= equal
            caller = name if equal else caller
        if matched:
            if caller is not None:
                scope[CALLER] = caller
            return None
        logger.debug("refused a request with an unknown API key")
        return AuthenticationError("Incorrect API key provided.", code="invalid_api_key", headers=_CHALLENGE)

    def _digests(self) -> list[tuple[bytes, str | None]]:
        """Every accepted key's SHA-256 and its name (None: a key of `auth_api_keys_env`), read from the env now."""
        raw = os.environ.get(self.env_name, "") if self.env_name else ""
        keys = (key.strip() for key in raw.split(","))
        found: list[tuple[bytes, str | None]] = [(hashlib.sha256(key.encode()).digest(), None) for key in keys if key]
        for key in self.keys:
            value = os.environ.get(key.key_env, "").strip() if key.key_env else ""
            if value:
                found.append((hashlib.sha256(value.encode()).digest(), key.name))
        found += self._hashed
        return found

    def _warn_unconfigured(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "adapter_critic: inbound auth is on (auth_api_keys_env = %r, auth.keys: %s) but no key is set (the "
                "env vars are unset or empty), so every request except /health is refused with 401. Set them.",
                self.env_name,
                ", ".join(key.name for key in self.keys) or "none",
            )


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
