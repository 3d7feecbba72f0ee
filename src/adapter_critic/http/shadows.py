"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET {prefix}/shadows/{model}`: what a served model's shadow evaluations found, per candidate (`evals.shadows`):
wins, ties and losses, the win rate with its bootstrap interval, and what the candidate adds per request
(docs/guides/routing.md#shadow-evaluation). Served when a served model has a shadow; a key reads it for the models
it may use, over the evaluations of the runs it may see (its own, unless it is an admin key); the viewer shows it
beside a shadowed run. `?since_hours=H` keeps the recent ones."""

from __future__ import annotations

import time

import msgspec
from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import APIError, RequestError
from ..evals.shadows import summary
from ..protocols.openai.render import JSON, error_response
from ..service.compose import Service
from .auth import CALLER, InboundAuth
from .fastpath import ASGIEndpoint
from .runs import runs_seen_by
from .storeread import read_store


def shadows_routes(service: Service, prefix: str, auth: InboundAuth) -> list[Route]:
    """The shadows route, when a served model has a shadow."""
    chat = service.chat
    if not chat.shadowed:
        return []

    async def report(scope: Scope, receive: Receive, send: Send) -> None:
        model: str = scope["path_params"]["model"]
        try:
            chat.check_reach(model, scope.get(CALLER))
            if model not in chat.shadowed:
                raise RequestError(f"{model!r} has no shadow (no `shadow` table).", status_code=404)
            since = _since(scope)
            from ..store.routing import shadow_rows

            seen_by = runs_seen_by(scope, auth)
            rows = await read_store(
                chat,
                "Shadow evaluations",
                lambda engine: shadow_rows(engine, served_model=model, since=since, seen_by=seen_by),
            )
        except APIError as exc:
            await error_response(exc, redact=service.secrets.redact)(scope, receive, send)
            return
        body = {"object": "list", "served_model": model, "evaluations": len(rows), "data": summary(rows)}
        await Response(msgspec.json.encode(body), media_type=JSON)(scope, receive, send)

    return [Route(f"{prefix}/shadows/{{model:path}}", ASGIEndpoint(report), methods=["GET"])]


def _since(scope: Scope) -> float | None:
    given = QueryParams(scope.get("query_string", b"")).get("since_hours")
    if given is None:
        return None
    try:
        hours = float(given)
    except ValueError:
        hours = -1.0
    if not hours > 0:
        raise RequestError("`since_hours` must be a number of hours above 0.", param="since_hours")
    return time.time() - hours * 3600
