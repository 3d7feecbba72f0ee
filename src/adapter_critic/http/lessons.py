"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET {prefix}/lessons/{model}`: every version of a learning served model's lessons, the newest first, each with what
changed from the version it was learnt after (`added`, `removed`) and what its check found (docs/guides/learning.md).
Served when a served model learns; a key reads the lessons of the models it may use (another's is a 404, as an
unknown model), and the viewer shows them beside the runs that used them."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import APIError, RequestError
from ..protocols.openai.render import JSON, error_response
from ..service.compose import Service
from .auth import CALLER
from .fastpath import ASGIEndpoint
from .storeread import read_store


def lessons_routes(service: Service, prefix: str) -> list[Route]:
    """The lessons route, when a served model learns."""
    chat = service.chat
    if not chat.learning:
        return []

    async def versions(scope: Scope, receive: Receive, send: Send) -> None:
        model: str = scope["path_params"]["model"]
        try:
            chat.check_reach(model, scope.get(CALLER))
            if model not in chat.learning:
                raise RequestError(f"{model!r} does not learn (it has no `learning` table).", status_code=404)
            from ..store import lessons

            found = await read_store(chat, "Lessons", lambda engine: lessons.versions(engine, model))
        except APIError as exc:
            await error_response(exc, redact=service.secrets.redact)(scope, receive, send)
            return
        by_number = {v.version: v for v in found}
        data: list[dict[str, Any]] = []
        for v in found:
            shown = msgspec.to_builtins(v)
            shown["added"], shown["removed"] = lessons.changes(v, by_number.get(v.parent) if v.parent else None)
            data.append(shown)
        body = msgspec.json.encode({"object": "list", "served_model": model, "data": data})
        await Response(body, media_type=JSON)(scope, receive, send)

    return [Route(f"{prefix}/lessons/{{model:path}}", ASGIEndpoint(versions), methods=["GET"])]
