"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The chat handler shared by the app and the middleware: one request body in, one response out.

It owns the order of checks (docs/reference/http.md): body and override checks (400), then the served model (404),
then resolution (400); and it turns every failure into the client's protocol's error envelope — no
traceback reaches a client. The client's protocol (`protocols.base.Inbound`: OpenAI chat completions,
Anthropic messages, …) decodes the body and renders the answer; the run in between is the same.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from ..access import KeyPolicy, check_model_name
from ..cache.answers import HEADER
from ..cache.hit import CacheHit
from ..cache.key import wanted
from ..config import Config
from ..core import ChatRequest, Plan
from ..errors import APIError, Overloaded, RequestError, internal_error
from ..events import RunRecord, Subscriber
from ..observe.logs import request_scope
from ..pipeline.nested import Nesting
from ..pipeline.resolve import check_overrides, resolve, unknown_model
from ..pipeline.run import Run
from ..pricing import price_table
from ..protocols.base import Inbound
from ..protocols.openai import INBOUND as OPENAI
from ..redact import Secrets
from ..store.recorder import RunRecorder
from ..store.settings import start_recording
from ..upstream.client import Upstream
from ..upstream.pinning import HostGuard, pinned_plan
from ..upstream.retry import RetryPolicy
from ..workflows import registry
from .admission import Admission
from .auth import CALLER, client_token
from .body import body_too_large, declared_too_large, read_body, refuse_many_choices
from .disconnect import ClientGone, cancel_on_disconnect, guard_send, log_client_gone
from .jsonanswer import JSONAnswer, protocol_error
from .requestid import bind
from .stream import RunStreamer, StreamResponse

if TYPE_CHECKING:
    from ..cache.answers import AnswerCache
    from ..observe.tracing import Tracing
    from ..quota import Quotas, Ticket
    from ..store.runstore import RunStore

logger = logging.getLogger("adapter_critic")
_NOT_TRACED = contextlib.nullcontext()


class ChatHandler:
    """Answers the protocols' POST routes, one request body at a time, and records the runs when there is a store.

    It is given its parts (`http.service.compose` builds them from the config) and owns their lifespan: the
    admission of requests, the upstream client and the run store."""

    def __init__(
        self,
        config: Config,
        *,
        secrets: Secrets,
        upstream: Upstream,
        retry_policy: RetryPolicy,
        admission: Admission,
        host_guard: HostGuard,
        store: RunStore | None = None,
        subscribers: Sequence[Subscriber] = (),
        tracing: Tracing | None = None,
        quotas: Quotas | None = None,
        cache: AnswerCache | None = None,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.upstream = upstream
        self.retry_policy = retry_policy
        self.admission = admission
        self.host_guard = host_guard
        self.store = store  # None: not recording (also once a store that could not be opened is given up)
        self.subscribers = tuple(subscribers)
        self.tracing = tracing
        self.prices = price_table(config.prices, config.pricing)  # None: no prices, no cost work
        self.quotas = quotas  # None: no limits configured, and no limit work at all
        self.cache = cache  # None: no served model has `cache = true`, and no cache work at all
        self.policy = KeyPolicy(config)  # what each named key may reach
        self._plans: dict[str, Plan] = {}
        self._per_request_plans: set[str] = set()

    def start(self) -> None:
        """Lifespan start-up: open the upstream client, admit requests."""
        self.admission.open()
        self.upstream.open()

    async def stop(self) -> None:
        """Lifespan shutdown: let the requests in flight finish (up to `shutdown_grace_seconds`), then close."""
        await self.finish()
        await self.close()

    async def finish(self) -> None:
        """The first half of shutdown: the requests in flight finish (up to `shutdown_grace_seconds`) and their runs
        are written. The middleware does this before its wrapped app hears of the shutdown (its requests may be
        calling that app in-process), and `close`s once the app has shut down."""
        await self.admission.drain(self.config.shutdown_grace_seconds)
        await self.stop_recording()

    async def close(self) -> None:
        """The second half of shutdown: close the upstream client and the limits' counters (their charges under way
        written first)."""
        await self.upstream.aclose()
        if self.quotas is not None:
            await self.quotas.aclose()
        if self.cache is not None:
            await self.cache.aclose()

    async def start_recording(self) -> None:
        """Lifespan start-up of the run store (when there is one): says where runs go."""
        if self.store is not None and not await start_recording(self.store, self.config.store):
            self.store = None
            if self.cache is not None and self.cache.keeps_in_store:
                logger.warning("not caching answers: the cache keeps them in the run store, which is off")
                self.cache = None

    async def stop_recording(self) -> None:
        """Write what is queued and close the run store."""
        if self.store is not None:
            await self.store.aclose()

    async def chat(
        self,
        body: bytes,
        *,
        client_token: str | None = None,
        request_id: str | None = None,
        run_id: str | None = None,
        inbound: Inbound = OPENAI,
        receive: Receive | None = None,
        caller: str | None = None,
    ) -> ASGIApp | None:
        """Run one request body of the `inbound` protocol (default: chat completions) through its workflow;
        returns the response to send — or None when the client went away first (told by `receive`, whose
        request body has been read: the run is then cancelled and the disconnect logged).

        A streaming request's run happens inside the returned response, as it is sent (which watches for the
        client itself). `client_token` is the caller's API key, sent only to targets with
        `forward_client_authorization`. `run_id` is the run's id
        (also the response's), `request_id` what the logs and an unexpected error name (default: the run id).
        `caller` is the name of the named key the request came with (`[[auth.keys]]`): its limits apply.
        """
        completion_id = run_id or request_id or inbound.new_id()
        request_id = request_id or completion_id
        redact = self.secrets.redact  # also what the request itself echoes (model names, URLs)
        headers = inbound.headers(completion_id)
        try:
            request = inbound.decode(body, max_messages=self.config.max_messages)
            to_resolve = check_overrides(self.config, request.overrides, request.overrides_param)
            quotas, ticket, policy = self.quotas, None, self.policy
            if request.model not in self.config.served_models:
                check_model_name(request.model)
            if policy.any_bounds and not policy.allows(caller, request.model):
                raise unknown_model(request.model, policy.visible(caller, self.config.served_models))
            plan = self._plan(request, client_token)
            if request.overrides is not None and policy.any_bounds:
                policy.check_overrides(caller, plan, request.overrides_param)
            if to_resolve:
                plan = pinned_plan(plan, await self.host_guard.pin(to_resolve))
            workflow = registry.get(plan.mode)
            if not workflow.many_choices:
                refuse_many_choices(request, plan.mode)
            if quotas is not None:
                ticket = await quotas.admit_run(
                    caller,
                    plan,
                    request,
                    lambda served_id: self._plan_of(served_id, client_token),
                    self.prices,
                    made_up=request.overrides is not None or plan.served_id not in self.config.served_models,
                )
                if ticket is not None:
                    headers = {**headers, **ticket.headers}
            subscribers = self._subscribers(request_id, request, plan, client_token, caller, ticket)
            cache = self.cache
            ttl = None if cache is None else cache.ttl(plan)
            if cache is not None and ttl is not None and wanted(request):
                owner = cache.owner(plan, caller, client_token)
                key = cache.key(plan, request, lambda served_id: self._plan_of(served_id, client_token), owner)
                found = await cache.lookup(key)
                headers = {**headers, HEADER: "miss" if found is None else "hit"}
                if found is not None:
                    hit = CacheHit(found, plan, request, completion_id, subscribers, self.prices)
                    if request.stream:
                        return self._stream(hit.execute, inbound, request, plan, completion_id, request_id, headers)
                    record = hit.answer()
                    if ticket is not None:
                        await ticket.charged()
                    body = inbound.response(record, response_id=completion_id, request=request)
                    return JSONAnswer(body, headers=headers)
                subscribers = (*subscribers, cache.keeper(key, ttl, _token(plan, client_token)))
            run = Run(
                workflow,
                plan,
                request,
                self.upstream,
                self.retry_policy,
                run_id=completion_id,
                request_timeout=self.config.request_timeout_seconds,
                max_concurrent_calls=self.config.max_concurrent_calls_per_run,
                prices=self.prices,
                subscribers=subscribers,
                nesting=self._nesting(request_id, client_token, caller) if plan.nests else None,
            )
            if request.stream:
                return self._stream(
                    run.execute, inbound, request, plan, completion_id, request_id, headers, record=run.record
                )
            if receive is None:
                record = await run.execute()
            else:
                watched = await cancel_on_disconnect(receive, request_id, run.execute)
                if watched is None:
                    return None
                record = watched
            if ticket is not None:
                await ticket.charged()  # the next request sees this run's tokens
        except APIError as exc:
            return protocol_error(inbound, exc, redact=redact, headers=headers)
        except Exception:
            logger.exception("request %s failed unexpectedly", request_id)
            return protocol_error(inbound, internal_error(request_id), headers=headers)
        return JSONAnswer(inbound.response(record, response_id=completion_id, request=request), headers=headers)

    def _stream(
        self,
        execute: RunStreamer,
        inbound: Inbound,
        request: ChatRequest,
        plan: Plan,
        completion_id: str,
        request_id: str,
        headers: Mapping[str, str],
        *,
        record: RunRecord | None = None,
    ) -> StreamResponse:
        """The streamed response of a run (or of a cache hit's: `execute` gives its record at once)."""
        return StreamResponse(
            execute,
            inbound.stream(request, response_id=completion_id, served_model=plan.served_id),
            request_id=request_id,
            keepalive_seconds=self.config.keepalive_seconds,
            redact=self.secrets.redact,
            progress=bool(request.overrides is not None and request.overrides.progress),
            errors=inbound.render_error,
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
            record=record,
        )

    def _subscribers(
        self,
        request_id: str,
        request: ChatRequest,
        plan: Plan,
        client_token: str | None,
        caller: str | None = None,
        ticket: Ticket | None = None,
    ) -> Sequence[Subscriber]:
        """A run's subscribers: the service's, the limits' charge at its end (when a limit applies), and its recorder
        when the service records runs (`store.recorder`), which masks the caller's token when a target forwards it
        (none can without one) and keeps the caller's key name."""
        subscribers = self.subscribers if ticket is None else (*self.subscribers, ticket.on_event)
        if self.store is None:
            return subscribers
        recorder = RunRecorder(
            self.store.enqueue, request_id, request, self.config.store.capture, _token(plan, client_token), caller
        )
        return (*subscribers, recorder)

    def _nesting(self, request_id: str, client_token: str | None, caller: str | None = None) -> Nesting:
        """How a run of this request runs the served models its stages name: their plans as for a request without
        overrides, and child runs with the service's subscribers (recorded under the same request id and caller)."""
        return Nesting(
            plan_of=lambda served_id: self._plan_of(served_id, client_token),
            subscribers_of=lambda request, plan: self._subscribers(request_id, request, plan, client_token, caller),
        )

    def _plan(self, request: ChatRequest, client_token: str | None) -> Plan:
        if request.overrides is None:
            return self._plan_of(request.model, client_token, request.overrides_param)
        return resolve(
            self.config, request.model, request.overrides, request.overrides_param, client_token=client_token
        )

    def _plan_of(self, model: str, client_token: str | None, where: str = "x_adapter_critic") -> Plan:
        """`resolve` without overrides, remembered per served model: then it depends only on the (frozen) config,
        unless a target forwards the caller's token. Unknown models (`resolve` raises 404) and prefixed ones (a set
        without end, `[models]`) are never remembered, so this holds at most one plan per served model."""
        if model not in self._per_request_plans:
            plan = self._plans.get(model)
            if plan is not None:
                return plan
            plan = resolve(self.config, model, None, where)
            if not _forwards_client_token(plan):
                if model in self.config.served_models:
                    self._plans[model] = plan
                return plan
            if model in self.config.served_models:
                self._per_request_plans.add(model)
        return resolve(self.config, model, None, where, client_token=client_token)

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
        token = client_token(scope, inbound.credential)
        traced = self.tracing.inbound(scope) if self.tracing is not None else _NOT_TRACED
        with request_scope(request_id), traced:
            try:
                try:
                    async with self.admission.slot():
                        response = await self.chat(
                            body, client_token=token, request_id=request_id, run_id=run_id, inbound=inbound,
                            receive=receive, caller=scope.get(CALLER),
                        )  # fmt: skip
                        if response is not None:
                            await response(scope, receive, send)  # a stream holds its slot until it is sent
                except Overloaded as exc:
                    await protocol_error(inbound, exc, headers=inbound.headers(run_id))(scope, receive, send)
            except ClientGone:
                log_client_gone(request_id)


def _token(plan: Plan, client_token: str | None) -> str | None:
    """The caller's token when a target of the plan forwards it: what a record of the run masks besides the keys."""
    if client_token is None:
        return None
    return next((t.client_token for t in plan.all_targets() if t.client_token), None)


def _forwards_client_token(plan: Plan) -> bool:
    return any(target.forward_client_authorization for target in plan.all_targets())
