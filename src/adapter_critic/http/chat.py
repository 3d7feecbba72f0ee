"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The protocols' `POST` routes: read a body, decode it in the client's protocol, hand it to the chat service
(`service.chat`) with its caller, and render what comes back — a finished record, or a stream to write — in that
protocol; every failure in the protocol's error envelope, never a traceback.

The order of checks (docs/reference/http.md): the body's size (413), its decoding (400), then the service's steps.
A plain request's service call is watched for the client going away (it is then cancelled and logged); a streamed
one's run is driven by its writer (`stream.StreamResponse`), which watches by itself.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from ..core import ChatRequest
from ..errors import APIError, Overloaded, RequestError, internal_error
from ..observe.logs import request_scope
from ..protocols.base import Inbound
from ..protocols.openai import INBOUND as OPENAI
from ..service.chat import ChatService
from ..service.outcomes import Answered, Caller, Streaming
from .auth import CALLER, client_token
from .body import body_too_large, declared_too_large, read_body
from .disconnect import ClientGone, cancel_on_disconnect, guard_send, log_client_gone
from .jsonanswer import JSONAnswer, protocol_error
from .requestid import bind
from .stream import StreamResponse

if TYPE_CHECKING:
    from ..observe.tracing import Tracing

logger = logging.getLogger("adapter_critic")
_NOT_TRACED = contextlib.nullcontext()
NO_CALLER = Caller()  # no key, no token: a server without inbound auth


class ChatHandler:
    """The protocols' `POST` routes of one chat service, one request body at a time."""

    def __init__(self, service: ChatService, *, tracing: Tracing | None = None) -> None:
        self.service = service
        self.config = service.config
        self.tracing = tracing
        self.routes = service.routing is not None  # an `auto` model's rules may read the route header

    async def chat(
        self,
        body: bytes,
        *,
        caller: Caller = NO_CALLER,
        request_id: str | None = None,
        run_id: str | None = None,
        inbound: Inbound = OPENAI,
        receive: Receive | None = None,
    ) -> ASGIApp | None:
        """Answer one request body of the `inbound` protocol (default: chat completions): the response to send — or
        None when the client went away first (told by `receive`, whose request body has been read: the work is then
        cancelled and the disconnect logged). `run_id` is the run's id (also the response's), `request_id` what the
        logs and an unexpected error name (default: the run id)."""
        completion_id = run_id or request_id or inbound.new_id()
        request_id = request_id or completion_id
        redact = self.service.secrets.redact  # also what the request itself echoes (model names, URLs)
        headers = dict(inbound.headers(completion_id))  # the service adds the answer's own (limits, cache)
        try:
            request = inbound.decode(body, max_messages=self.config.max_messages)
            answering = self.service.answer(
                request, caller, run_id=completion_id, request_id=request_id, headers=headers
            )
            if receive is None or request.stream:
                outcome = await answering
            else:
                watched = await cancel_on_disconnect(receive, request_id, lambda: answering)
                if watched is None:
                    return None
                outcome = watched
            if isinstance(outcome, Streaming):
                return self._stream(outcome, inbound, request, completion_id, request_id)
        except APIError as exc:
            return protocol_error(inbound, exc, redact=redact, headers=headers)
        except Exception:
            logger.exception("request %s failed unexpectedly", request_id)
            return protocol_error(inbound, internal_error(request_id), headers=headers)
        answered: Answered = outcome
        body = inbound.response(answered.record, response_id=completion_id, request=request)
        return JSONAnswer(body, headers=answered.headers)

    def _stream(
        self, outcome: Streaming, inbound: Inbound, request: ChatRequest, completion_id: str, request_id: str
    ) -> StreamResponse:
        """The streamed response of a run (or of a cache hit's: it gives its record at once)."""
        return StreamResponse(
            outcome.run,
            inbound.stream(request, response_id=completion_id, served_model=outcome.plan.served_id),
            request_id=request_id,
            keepalive_seconds=self.config.keepalive_seconds,
            redact=self.service.secrets.redact,
            progress=bool(request.overrides is not None and request.overrides.progress),
            errors=inbound.render_error,
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in outcome.headers.items()],
            record=outcome.record,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The chat-completions endpoint as plain ASGI (`endpoint(OPENAI)`)."""
        await self.serve(OPENAI, scope, receive, send)

    def endpoint(self, inbound: Inbound) -> ASGIApp:
        """The `POST` endpoint of a protocol's route, as plain ASGI."""

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await self.serve(inbound, scope, receive, send)

        return app

    async def serve(self, inbound: Inbound, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body within the limit, answer it in the `inbound` protocol."""
        limit = self.config.max_body_bytes
        try:
            if declared_too_large(scope, limit):
                raise body_too_large(limit)
            body = await read_body(receive, limit)
        except RequestError as exc:
            await protocol_error(inbound, exc)(scope, receive, send)
            return
        await self.respond(body, scope, receive, send, inbound)

    async def respond(self, body: bytes, scope: Scope, receive: Receive, send: Send, inbound: Inbound = OPENAI) -> None:
        """Answer one request body of the `inbound` protocol, within a request slot (overload limit, shutdown).

        A client that goes away meanwhile cancels the request and leaves one line in the log (`disconnect`)."""
        request_id, run_id = bind(scope, inbound.new_id)  # the protocol's own form of id (`chatcmpl-…`, `msg_…`)
        send = guard_send(send)
        caller = Caller(
            scope.get(CALLER), client_token(scope, inbound.credential), route_hint(scope) if self.routes else None
        )
        traced = self.tracing.inbound(scope) if self.tracing is not None else _NOT_TRACED
        with request_scope(request_id), traced:
            try:
                try:
                    async with self.service.admission.slot():
                        response = await self.chat(
                            body, caller=caller, request_id=request_id, run_id=run_id, inbound=inbound,
                            receive=receive,
                        )  # fmt: skip
                        if response is not None:
                            await response(scope, receive, send)  # a stream holds its slot until it is sent
                except Overloaded as exc:
                    await protocol_error(inbound, exc, headers=inbound.headers(run_id))(scope, receive, send)
            except ClientGone:
                log_client_gone(request_id)


ROUTE_HEADER = b"x-adapter-critic-route"


def route_hint(scope: Scope) -> str | None:
    """The request's `x-adapter-critic-route` header (what an `auto` model's rules may read), or None."""
    for name, value in scope["headers"]:
        if name == ROUTE_HEADER:
            hint: str = value.decode("latin-1")[:256]
            return hint
    return None
