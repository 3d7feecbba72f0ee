"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The runs API over a run store: `GET /runs`, `GET /runs/{id}`, `GET /runs/{id}/events` (SSE replay and live tail),
`POST /runs/{id}/feedback` (`http.feedback`).

The JSON is the store's own shapes (`store.records`), documented in `adapter_critic.store`. A bad filter, cursor or
run id is a 400 and an unknown run a 404, in the OpenAI error envelope.

Under inbound auth a caller sees the runs its key may (`runs_seen_by`): a named key that is not `admin` only its
own, and another key's run is a 404 like an unknown id, on every path here.
"""

from __future__ import annotations

import contextlib
import math
import re
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import RequestError
from ..protocols.openai.render import error_response
from ..service.compose import Service
from ..store.records import EVERY_RUN, STATUSES, BadCursor, RunQuery, RunsOf, parse_time, runs_of_key
from .auth import CALLER, InboundAuth
from .disconnect import ClientGone, guard_send
from .fastpath import ASGIEndpoint
from .feedback import OnFeedback, post_feedback
from .jsonanswer import JSONAnswer

if TYPE_CHECKING:
    from ..store.runstore import RunStore

_encoder = msgspec.json.Encoder()
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}")
_FILTERS = (
    "served_model", "mode", "status", "degraded", "since", "until", "request_id", "parent_run_id", "min_cost",
    "cache_hit", "key_name", "has_feedback", "limit", "cursor",
)  # fmt: skip
MAX_LIMIT = 1000
KEEPALIVE_SECONDS = 15.0
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def runs_seen_by(scope: Scope, auth: InboundAuth) -> RunsOf:
    """Whose runs the request's caller sees. Auth off: every run. A named key (`[[auth.keys]]`): every run when it is
    `admin`, else only its own. A nameless key (`auth_api_keys_env`): every run when no named key is configured (as
    before named keys), else only the runs no named key made — an operator who reads every run uses an admin key."""
    if not auth.enabled:
        return EVERY_RUN
    caller: str | None = scope.get(CALLER)
    if caller is None:
        return runs_of_key(None) if auth.keys else EVERY_RUN
    return EVERY_RUN if caller in auth.admins else runs_of_key(caller)


class RunsAPI:
    """The runs API of the store `source` returns (None: not recording, a 404); `dispatch` answers a request for
    `/runs` + `rest`, showing the caller the runs `auth` lets it see (`runs_seen_by`); `on_feedback` is told of each
    feedback entry kept (the metrics count it)."""

    def __init__(
        self, source: Callable[[], RunStore | None], auth: InboundAuth, on_feedback: OnFeedback | None = None
    ) -> None:
        self.source = source
        self.auth = auth
        self.on_feedback = on_feedback

    @property
    def store(self) -> RunStore:
        store = self.source()
        if store is None:
            raise RequestError(
                "This server records no runs: store.url is none, or the run store could not be opened (see the "
                "server log).",
                status_code=404,
                code="store_off",
            )
        return store

    async def dispatch(self, scope: Scope, receive: Receive, send: Send, rest: str) -> None:
        try:
            self.store  # noqa: B018 (a 404 when not recording)
            if rest in ("", "/"):
                await self.list(scope, receive, send)
                return
            run_id, _, tail = rest.removeprefix("/").partition("/")
            run_id = urllib.parse.unquote(run_id)
            posting = scope["method"] == "POST"
            if posting != (tail == "feedback"):
                allowed = "POST" if tail == "feedback" else "GET"
                raise RequestError(
                    f"Method {scope['method']} is not allowed on {scope['path']!r}: use {allowed}.", status_code=405
                )
            if tail not in ("", "events", "feedback") or not _RUN_ID.fullmatch(run_id):
                if tail not in ("", "events", "feedback"):
                    raise RequestError(f"Unknown path {scope['path']!r}.", status_code=404)
                raise RequestError(
                    f"{run_id[:140]!r} is not a run id: a run id is 1 to 128 letters, digits and . _ : @ + = -",
                    param="id",
                )
            if posting:
                seen_by = runs_seen_by(scope, self.auth)
                await post_feedback(self.store, seen_by, scope, receive, send, run_id, self.on_feedback)
            elif tail == "events":
                await self.events(scope, receive, send, run_id)
            else:
                await self.detail(scope, receive, send, run_id)
        except RequestError as exc:
            await error_response(exc)(scope, receive, send)

    async def list(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "GET":
            raise RequestError(f"Method {scope['method']} is not allowed on {scope['path']!r}.", status_code=405)
        query, limit, cursor = _query(scope)
        try:
            page = await self.store.list_runs(query, limit=limit, cursor=cursor, seen_by=runs_seen_by(scope, self.auth))
        except BadCursor:
            raise RequestError(
                "`cursor` is not one this server handed out: pass a page's next_cursor as it is.", param="cursor"
            ) from None
        await JSONAnswer(_encoder.encode(page))(scope, receive, send)

    async def detail(self, scope: Scope, receive: Receive, send: Send, run_id: str) -> None:
        run = await self.store.get_run(run_id, seen_by=runs_seen_by(scope, self.auth))
        if run is None:
            raise _not_found(run_id)
        await JSONAnswer(_encoder.encode(run))(scope, receive, send)

    async def events(self, scope: Scope, receive: Receive, send: Send, run_id: str) -> None:
        """Replay the run's stages as SSE, then tail it while it is running; ends with `event: end`."""
        seen_by = runs_seen_by(scope, self.auth)
        if await self.store.database.get_summary(run_id, seen_by) is None:
            raise _not_found(run_id)
        send = guard_send(send)
        with contextlib.suppress(ClientGone):  # the viewer closed the stream: nothing to say
            await self._stream(receive, send, run_id, seen_by)

    async def _stream(self, receive: Receive, send: Send, run_id: str, seen_by: RunsOf) -> None:
        sender, events = anyio.create_memory_object_stream[bytes](16)

        async def produce() -> None:
            async with sender:
                async for kind, item in self.store.follow(run_id, seen_by=seen_by):
                    head = f"id: {item.index}\n" if kind == "stage" else ""  # type: ignore[union-attr]
                    await sender.send(f"{head}event: {kind}\ndata: ".encode() + _encoder.encode(item) + b"\n\n")

        async def watch(scope_: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope_.cancel()

        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(watch, tg.cancel_scope)
            async with events:
                while True:
                    data = b": keep-alive\n\n"
                    with anyio.move_on_after(KEEPALIVE_SECONDS):
                        try:
                            data = await events.receive()
                        except anyio.EndOfStream:
                            break
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


def _not_found(run_id: str) -> RequestError:
    return RequestError(f"No run {run_id!r} in the run store.", status_code=404, param="id", code="run_not_found")


def _query(scope: Scope) -> tuple[RunQuery, int, str | None]:
    """The list's filters from the query string; a 400 naming the parameter for any that is wrong."""
    params: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if name not in _FILTERS:
            raise RequestError(f"Unknown query parameter {name!r}; the filters are {', '.join(_FILTERS)}.", param=name)
        params[name] = value
    fields: dict[str, Any] = {}
    for name in ("served_model", "mode", "request_id", "parent_run_id", "key_name"):
        if name in params:
            fields[name] = params[name]
    if "status" in params:
        if params["status"] not in STATUSES:
            raise RequestError(f"`status` must be one of {', '.join(STATUSES)}.", param="status")
        fields["status"] = params["status"]
    for name in ("degraded", "cache_hit", "has_feedback"):
        if name in params:
            flag = params[name].lower()
            if flag not in ("true", "false", "1", "0"):
                raise RequestError(f"`{name}` must be true or false.", param=name)
            fields[name] = flag in ("true", "1")
    for name in ("since", "until"):
        if name in params:
            try:
                fields[name] = parse_time(params[name])
            except ValueError:
                raise RequestError(
                    f"`{name}` must be an ISO 8601 time (2026-01-31T12:00:00Z) or Unix seconds.", param=name
                ) from None
    if "min_cost" in params:
        fields["min_cost"] = _min_cost(params["min_cost"])
    limit = 50
    if "limit" in params:
        text = params["limit"]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise RequestError(f"`limit` must be a whole number from 1 to {MAX_LIMIT}.", param="limit")
        limit = int(text)
    return RunQuery(**fields), limit, params.get("cursor") or None


def _min_cost(text: str) -> float:
    """`min_cost`: a number, 0 or more (in the currency of the server's prices)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RequestError("`min_cost` must be a number, 0 or more (in the currency of the prices).", param="min_cost")
    return value


def runs_routes(service: Service, prefix: str, auth: InboundAuth) -> list[Route]:
    """`GET {prefix}/runs…` (the runs API) and `POST {prefix}/runs/{id}/feedback` when the service records runs and
    `store.api` is on."""
    if service.store is None or not service.config.store.api:
        return []
    api = RunsAPI(lambda: service.store, auth, service.on_feedback)

    async def runs(scope: Scope, receive: Receive, send: Send) -> None:
        await api.dispatch(scope, receive, send, scope["path_params"]["rest"])

    return [Route(f"{prefix}/runs{{rest:path}}", ASGIEndpoint(runs), methods=["GET", "POST"])]
