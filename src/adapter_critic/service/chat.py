"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The chat service: one decoded request and its caller in, its run out — and nothing of HTTP.

It owns the order of a request's domain steps (docs/reference/http.md): the override checks (400), the caller's key
policy (404 for a model it may not use, 403 for an override it may not make), the plan (404, 400), the override
hosts' addresses (400), the limits (429), the cache, and the run. A plain request's run is run here and its finished
record returned (`Answered`); a streamed one is returned ready to run (`Streaming`): its writer drives it with the
sinks its chunks go to, so that every chunk goes straight from the upstream's read to the client's write, with no
queue or task between (a pull-based stream would add a task switch per chunk). The protocols' routes
(`http.chat`), the middleware and the mount only decode and render around it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..access import KeyPolicy, check_model_name
from ..cache.answers import HEADER
from ..cache.hit import CacheHit
from ..cache.key import wanted
from ..config import Config
from ..core import ChatRequest, Plan
from ..events import RunRecord, Subscriber
from ..observe.logs import served_line
from ..pipeline.nested import Nesting
from ..pipeline.resolve import check_overrides, resolve, unknown_model
from ..pipeline.run import Run
from ..pricing import price_table
from ..redact import Secrets
from ..request.choices import refuse_many_choices
from ..store.recorder import RunRecorder
from ..store.settings import start_recording
from ..upstream.client import Upstream
from ..upstream.pinning import HostGuard, pinned_plan
from ..upstream.retry import RetryPolicy
from ..workflows import registry
from .admission import Admission
from .lessons import with_lessons
from .outcomes import Answered, Caller, Streaming
from .routing import Routing, passed_on, refuse_effort
from .shadow import RunModel, Shadows, then

if TYPE_CHECKING:
    from ..cache.answers import AnswerCache
    from ..limits import Limits, Ticket
    from ..request.overrides import Overrides
    from ..store.runstore import RunStore
    from ..workflows.base import Workflow

logger = logging.getLogger("adapter_critic")


class ChatService:
    """Answers decoded requests, and owns the lifespan of the parts it uses (`service.compose` builds them): the
    admission of requests, the upstream client, the run store, the limits' counters and the cache."""

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
        limits: Limits | None = None,
        cache: AnswerCache | None = None,
        routing: Routing | None = None,
        shadows: Shadows | None = None,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.upstream = upstream
        self.retry_policy = retry_policy
        self.admission = admission
        self.host_guard = host_guard
        self.store = store  # None: not recording (also once a store that could not be opened is given up)
        self.subscribers = tuple(subscribers)
        self.prices = price_table(config.prices, config.pricing)  # None: no prices, no cost work
        self.limits = limits  # None: no limits configured, and no limit work at all
        self.cache = cache  # None: no served model has `cache = true`, and no cache work at all
        self.policy = KeyPolicy(config)  # what each named key may reach
        self._plans: dict[str, Plan] = {}
        self._per_request_plans: set[str] = set()
        # Served models whose reviewers learn (docs/guides/learning.md): each run reads its active lessons.
        self.learning = frozenset(i for i, served in config.served_models.items() if served.learning is not None)
        # A version to use instead of the active one, by served model (None: no lessons): `lessons learn` checks a
        # new version against the active one in process this way.
        self.lessons_pinned: dict[str, int | None] = {}
        self.routing = routing  # None: no `auto` model, and no routing work
        self.routed = frozenset(() if routing is None else routing.routers)
        self.shadows = shadows  # None: no served model has a shadow, and no shadow work
        self.shadowed = frozenset(() if shadows is None else shadows.shadows)

    # -- lifespan ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start-up: say what is served, open the upstream client, admit requests."""
        logger.info(served_line(self.config))
        self.admission.open()
        self.upstream.open()

    async def stop(self) -> None:
        """Shutdown: let the requests in flight finish (up to `shutdown_grace_seconds`), then close."""
        await self.finish()
        await self.close()

    async def finish(self) -> None:
        """The first half of shutdown: the requests in flight finish (up to `shutdown_grace_seconds`) and their runs
        are written. The middleware does this before its wrapped app hears of the shutdown (its requests may be
        calling that app in-process), and `close`s once the app has shut down."""
        await self.admission.drain(self.config.shutdown_grace_seconds)
        if self.shadows is not None:
            await self.shadows.drain(self.config.shutdown_grace_seconds)
        await self.stop_recording()

    async def close(self) -> None:
        """The second half of shutdown: close the upstream client, the limits' counters (their charges under way
        written first) and the cache."""
        await self.upstream.aclose()
        if self.limits is not None:
            await self.limits.aclose()
        if self.cache is not None:
            await self.cache.aclose()

    async def start_recording(self) -> None:
        """Start-up of the run store (when there is one): says where runs go."""
        if self.store is not None and not await start_recording(self.store, self.config.store):
            self.store = None
            if self.cache is not None and self.cache.keeps_in_store:
                logger.warning("not caching answers: the cache keeps them in the run store, which is off")
                self.cache = None

    async def stop_recording(self) -> None:
        """Write what is queued and close the run store."""
        if self.store is not None:
            await self.store.aclose()

    # -- a request -----------------------------------------------------------------------------------------------
    async def answer(
        self, request: ChatRequest, caller: Caller, *, run_id: str, request_id: str, headers: dict[str, str]
    ) -> Answered | Streaming:
        """Take `request` of `caller` through its domain steps (this module's docstring) and answer it: a plain one
        run to its end, a streamed one ready to run. `headers` are the protocol's own: the answer's (the limits',
        the cache's) are added to that dict as they are known, so an error raised after them carries them too.
        Raises the `APIError` the client is answered with."""
        to_resolve = check_overrides(self.config, request.overrides, request.overrides_param)
        ticket, policy = None, self.policy
        self.check_reach(request.model, caller.name)
        # An `auto` model's request gives its settings to the chosen candidate (never a mode or a target: 400).
        passed = passed_on(request) if request.model in self.routed else None
        plan = self._plan(request, caller.token)
        if request.overrides is not None and policy.any_bounds:
            policy.check_overrides(caller.name, plan, request.overrides_param)
        if to_resolve:
            plan = pinned_plan(plan, await self.host_guard.pin(to_resolve))
        if plan.served_id in self.routed:
            assert self.routing is not None
            engine = None if self.store is None else self.store.database.engine
            plan = await self.routing.route(plan, request, caller.name, caller.route, engine)
        elif request.overrides is not None:
            refuse_effort(request, plan.served_id)
        if plan.served_id in self.learning and self.store is not None:
            plan = await with_lessons(plan, self.store.database.engine, self.lessons_pinned)
        workflow = registry.get(plan.mode)
        if not workflow.many_choices:
            refuse_many_choices(request, plan.mode)
        if self.limits is not None:
            ticket = await self.limits.admit_run(
                caller.name,
                plan,
                request,
                lambda served_id: self._plan_of(served_id, caller.token),
                self.prices,
                made_up=request.overrides is not None or plan.served_id not in self.config.served_models,
            )
            if ticket is not None:
                headers.update(ticket.headers)
        subscribers = self._subscribers(request_id, request, plan, caller, ticket)
        cache = self.cache
        ttl = None if cache is None else cache.ttl(plan)
        if cache is not None and ttl is not None and wanted(request):
            owner = cache.owner(plan, caller.name, caller.token)
            key = cache.key(plan, request, lambda served_id: self._plan_of(served_id, caller.token), owner)
            found = await cache.lookup(key)
            headers[HEADER] = "miss" if found is None else "hit"
            if found is not None:
                hit = CacheHit(found, plan, request, run_id, subscribers, self.prices)
                if request.stream:
                    return Streaming(hit.execute, plan, headers)
                record = hit.answer()
                if ticket is not None:
                    await ticket.charged()
                return Answered(record, headers)
            subscribers = (*subscribers, cache.keeper(key, ttl, _token(plan, caller.token)))
        nesting = self._nesting(request_id, caller, passed, plan.api.served) if plan.nests else None
        run = self._run(workflow, plan, request, run_id, subscribers, nesting, parent=None)
        shadow = self._shadow(request, caller, request_id) if plan.served_id in self.shadowed else None
        if request.stream:
            return Streaming(run.execute if shadow is None else then(run.execute, shadow), plan, headers, run.record)
        record = await run.execute()
        if ticket is not None:
            await ticket.charged()  # the next request sees this run's tokens
        if shadow is not None:
            shadow(record)
        return Answered(record, headers)

    def _run(
        self,
        workflow: Workflow,
        plan: Plan,
        request: ChatRequest,
        run_id: str,
        subscribers: Sequence[Subscriber],
        nesting: Nesting | None,
        *,
        parent: tuple[str, str] | None,
    ) -> Run:
        return Run(
            workflow, plan, request, self.upstream, self.retry_policy, run_id=run_id,
            request_timeout=self.config.request_timeout_seconds,
            max_concurrent_calls=self.config.max_concurrent_calls_per_run, prices=self.prices,
            subscribers=subscribers, nesting=nesting, parent=parent,
        )  # fmt: skip

    # -- shadows (docs/guides/routing.md#shadow-evaluation) --------------------------------------------------------
    def _shadow(self, request: ChatRequest, caller: Caller, request_id: str) -> Callable[[RunRecord], None]:
        """What starts the shadow of a live run of `request` once its record is complete."""
        shadows = self.shadows
        assert shadows is not None
        run_model = self._run_model(request_id, caller)
        return lambda record: shadows.consider(record.served_model, request, record, caller.name, run_model)

    def _run_model(self, request_id: str, caller: Caller) -> RunModel:
        """How a shadow makes a model's run: as a request of the caller's without overrides, recorded under its key
        name, with no limit or cache (what it spends is the shadow budget's) and never with the caller's own key
        (the config refuses a shadow whose models would forward it)."""
        caller = Caller(caller.name)

        def run_model(model: str, request: ChatRequest, run_id: str, parent: tuple[str, str]) -> Run:
            plan = self._plan_of(model, caller.token)
            subscribers = self._subscribers(request_id, request, plan, caller)
            nesting = self._nesting(request_id, caller) if plan.nests else None
            return self._run(registry.get(plan.mode), plan, request, run_id, subscribers, nesting, parent=parent)

        return run_model

    def check_reach(self, model: str, caller: str | None) -> None:
        """Refuse a model name no upstream could serve (400), or one the caller's key may not use (404, as unknown,
        listing only its own): before anything else reads the name — a request's, or a token count's."""
        if model not in self.config.served_models:
            check_model_name(model)
        policy = self.policy
        if policy.any_bounds and not policy.allows(caller, model):
            raise unknown_model(model, policy.visible(caller, self.config.served_models))

    def _subscribers(
        self, request_id: str, request: ChatRequest, plan: Plan, caller: Caller, ticket: Ticket | None = None
    ) -> Sequence[Subscriber]:
        """A run's subscribers: the service's, the limits' charge at its end (when a limit applies), and its recorder
        when the service records runs (`store.recorder`), which masks the caller's token when a target forwards it
        (none can without one) and keeps the caller's key name."""
        subscribers = self.subscribers if ticket is None else (*self.subscribers, ticket.on_event)
        if self.store is None:
            return subscribers
        recorder = RunRecorder(
            self.store.enqueue,
            request_id,
            request,
            self.config.store.capture,
            _token(plan, caller.token),
            caller.name,
        )
        return (*subscribers, recorder)

    def _nesting(
        self, request_id: str, caller: Caller, passed: Overrides | None = None, chosen: str | None = None
    ) -> Nesting:
        """How a run of this request runs the served models its stages name: their plans as for a request without
        overrides (an `auto` model's `chosen` candidate: with the request's settings, `passed`), and child runs with
        the service's subscribers (recorded under the same request id and key)."""

        def plan_of(served_id: str) -> Plan:
            if passed is not None and served_id == chosen:
                return resolve(self.config, served_id, passed, "x_adapter_critic", client_token=caller.token)
            return self._plan_of(served_id, caller.token)

        return Nesting(
            plan_of=plan_of,
            subscribers_of=lambda request, plan: self._subscribers(request_id, request, plan, caller),
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


def _token(plan: Plan, client_token: str | None) -> str | None:
    """The caller's token when a target of the plan forwards it: what a record of the run masks besides the keys."""
    if client_token is None:
        return None
    return next((t.client_token for t in plan.all_targets() if t.client_token), None)


def _forwards_client_token(plan: Plan) -> bool:
    return any(target.forward_client_authorization for target in plan.all_targets())
