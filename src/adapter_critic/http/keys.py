"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET {prefix}/keys/{name}/usage`: a named key's usage (`limits.usage`), for the key itself or an `admin` key
(docs/guides/limits.md). Served only when the config names keys (`[[auth.keys]]`); another caller is refused 403,
and an admin asking for a name no key has gets 404."""

from __future__ import annotations

import logging
import time

import msgspec
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import Overloaded, RequestError
from ..limits.usage import key_usage
from ..protocols.openai.render import JSON, error_response
from ..service.compose import Service
from .auth import CALLER
from .fastpath import ASGIEndpoint

logger = logging.getLogger("adapter_critic")


def keys_routes(service: Service, prefix: str) -> list[Route]:
    """The usage route, when there are named keys."""
    names = {key.name for key in service.config.auth.keys}
    if not names:
        return []

    async def usage(scope: Scope, receive: Receive, send: Send) -> None:
        name: str = scope["path_params"]["name"]
        caller = scope.get(CALLER)
        if caller is None or (caller != name and caller not in service.keys.admins):
            refused = RequestError(
                "Only the key itself or an admin key (`admin = true`) may read a key's usage.",
                status_code=403,
                code="forbidden",
            )
            await error_response(refused)(scope, receive, send)
            return
        if name not in names:
            await error_response(RequestError(f"No key is named {name!r}.", status_code=404))(scope, receive, send)
            return
        limits = service.chat.limits
        now = limits.clock() if limits is not None else time.time()
        try:
            found = await key_usage(name, now, service.store, limits)
        except Exception as exc:
            logger.warning("usage of key %r could not be read: %s: %s", name, type(exc).__name__, exc)
            failed = Overloaded(  # 503, as admission answers when the limits' store is unreachable
                "The key's usage cannot be read right now (the run store or the limits' store is unreachable); "
                "retry later.",
                code="limits_unavailable",
                headers={"retry-after": "1"},
            )
            await error_response(failed)(scope, receive, send)
            return
        await Response(msgspec.json.encode(found), media_type=JSON)(scope, receive, send)

    return [Route(f"{prefix}/keys/{{name}}/usage", ASGIEndpoint(usage), methods=["GET"])]
