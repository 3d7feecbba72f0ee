"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The admission of a run against its caller's and its served model's limits, and its charge when it ends.

A request is admitted while every window it counts in has room: its requests counters go up by one as it is
admitted (atomically, with the checks), its tokens and cost are added when the run ends. So a window can go over
its tokens or cost limit by the runs admitted while it still had room — never a run cut in the middle. The
`x-ratelimit-*` headers, as OpenAI sends them, go on every answer a limit applies to, and on its 429s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..config import Config
from ..config.limits import RateLimits
from ..core import ChatRequest, Plan
from ..errors import Overloaded, RateLimited
from ..events import Event, RunFinished, RunRecord
from ..pricing import PriceTable
from .memory import Admitted, Check
from .reach import check_priced, reached, reservation
from .windows import Kind, reset_text, retry_after, window

logger = logging.getLogger("adapter_critic")

_MARGIN = 60  # seconds a counter outlives its window (clocks of instances differ a little)
# Each kind of window and the `RateLimits` setting that limits it (also how messages and the usage endpoint name it).
LIMIT_FIELDS: dict[Kind, str] = {
    "requests": "requests_per_minute",
    "tokens": "tokens_per_minute",
    "cost_day": "cost_per_day",
    "cost_month": "cost_per_month",
}


class Counters(Protocol):
    """Where the counters live: this process (`memory.MemoryCounters`) or a Redis (`shared.RedisCounters`)."""

    async def admit(self, checks: Sequence[Check]) -> Admitted: ...
    async def charge(self, amounts: Sequence[tuple[str, float, int]]) -> None: ...
    async def read(self, keys: Sequence[str]) -> list[float]: ...
    async def aclose(self) -> None: ...


def known_cost(record: RunRecord) -> float:
    """What a budget charges for a run: its known cost (`total_known`, docs/guides/cost.md) — a stage whose model
    has no price counts nothing, so a budget is a lower bound there; 0 without prices."""
    cost = record.cost()
    return 0.0 if cost is None else cost.total_known


@dataclass(frozen=True, slots=True)
class Bucket:
    """Whose limits: a key's (`key:team-a`) or a served model's (`model:gpt-x`)."""

    id: str
    limits: RateLimits
    what: str  # for messages: "key 'team-a'"

    def kinds(self) -> list[tuple[Kind, float]]:
        found = ((kind, getattr(self.limits, field)) for kind, field in LIMIT_FIELDS.items())
        return [(kind, float(limit)) for kind, limit in found if limit is not None]


@dataclass(frozen=True, slots=True)
class Usage:
    """One limit's state as a header or the usage endpoint shows it."""

    kind: Kind
    limit: float
    used: float
    reset: float

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit - self.used)


class Ticket:
    """An admitted run's share of the limits: the headers its answer carries, what its cost budgets hold back for it
    (`reserved`), and what its end charges — however it ends, a client gone away included."""

    def __init__(self, limits: Limits, buckets: list[Bucket], states: list[Usage], reserved: float = 0.0) -> None:
        self.limits = limits
        self.buckets = buckets
        self.reserved = reserved
        self.headers = rate_headers(states)
        self._charge: asyncio.Task[None] | None = None

    def on_event(self, event: Event) -> None:
        """A run subscriber: the run's tokens and cost are charged when it ends (streamed or not), its reservation
        settled."""
        if type(event) is RunFinished:
            self._charge = self.limits.charge_later(self.buckets, event.record, self.reserved)

    async def charged(self) -> None:
        """Wait for the run's charge (an answer not streamed is sent after it, so the caller's next request sees it)."""
        if self._charge is not None:
            await asyncio.shield(self._charge)


class Limits:
    """One service's limits: made only when some key or served model has a limit."""

    def __init__(
        self,
        config: Config,
        counters: Counters,
        *,
        clock: Callable[[], float] = time.time,
        run_cost: Callable[[RunRecord], float] = known_cost,
        on_refused: Callable[[str, str], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.counters = counters
        self.clock = clock
        self.run_cost = run_cost
        self.window_seconds = config.limits.window_seconds
        self.fail_open = config.limits.on_error == "open"
        self._prefix = config.limits.key_prefix
        self._keys = {
            k.name: Bucket(f"key:{k.name}", k.limits, f"key {k.name!r}") for k in config.auth.keys if k.limits.any
        }
        self._models = {
            served_id: Bucket(f"model:{served_id}", served.limits, f"served model {served_id!r}")
            for served_id, served in config.served_models.items()
            if served.limits.any
        }
        self._configured = frozenset(config.served_models)
        self._by_target: dict[tuple[str, str], list[str]] = {}  # a limited served model by its `api` target
        for served_id in self._models:
            api = config.served_models[served_id].api
            if api is not None:
                self._by_target.setdefault((api.model, api.url), []).append(served_id)
        self.reserve_tokens = config.limits.reserve_tokens
        self._on_refused = on_refused
        self._on_error = on_error
        self._pending: set[asyncio.Task[None]] = set()

    async def admit_run(
        self,
        caller: str | None,
        plan: Plan,
        request: ChatRequest,
        plan_of: Callable[[str], Plan],
        prices: PriceTable | None,
        *,
        made_up: bool,
    ) -> Ticket | None:
        """Count a run of `plan` in against its caller's limits and those of every served model it uses
        (`reach.reached`); under a cost budget, refuse a plan the request `made_up` (overrides, a prefixed name) that
        calls an unpriced model, and hold back the run's `reach.reservation`."""
        served = reached(plan, plan_of, self._configured, self._by_target) if self._models else [plan.served_id]
        buckets = [b for b in (self._keys.get(caller or ""), *map(self._models.get, served)) if b is not None]
        if not buckets:
            return None
        reserve = 0.0
        if any(bucket.limits.budgeted for bucket in buckets):
            if made_up:
                check_priced(plan, prices)
            if prices is not None:
                reserve = reservation(plan, request, prices, self.reserve_tokens)
        return await self.admit(buckets, reserve)

    async def admit(self, buckets: list[Bucket], reserve: float = 0.0) -> Ticket | None:
        """Count a run in against `buckets`, holding `reserve` of each cost budget; None when the counters failed
        open. Raises `RateLimited` (429) over a limit, `Overloaded` (503) when the counters failed and
        `limits.on_error = "closed"`."""
        now = self.clock()
        checks: list[Check] = []
        states: list[tuple[Bucket, Kind, float, float]] = []
        for bucket in buckets:
            for kind, limit in bucket.kinds():
                span = window(kind, now, self.window_seconds)
                add = 1.0 if kind == "requests" else reserve if kind in ("cost_day", "cost_month") else 0.0
                checks.append(Check(self._key(bucket, kind, span.id), limit, add, math.ceil(span.reset) + _MARGIN))
                states.append((bucket, kind, limit, span.reset))
        try:
            refused, values = await self.counters.admit(checks)
        except Exception as exc:
            self._failed("admit", exc)
            return None
        usages = [Usage(kind, limit, used, reset) for (_, kind, limit, reset), used in zip(states, values, strict=True)]
        if refused is not None:
            bucket, kind, limit, reset = states[refused]
            if self._on_refused is not None:
                self._on_refused(bucket.id.split(":", 1)[0], LIMIT_FIELDS[kind])
            raise RateLimited(
                f"Rate limit reached for {bucket.what}: {_amount(kind, limit)} ({LIMIT_FIELDS[kind]}). "
                f"Retry in {retry_after(reset)} s.",
                code="rate_limit_exceeded",
                headers={**rate_headers(usages), "retry-after": retry_after(reset), "retry-after-ms": _ms(reset)},
            )
        return Ticket(self, buckets, usages, reserve)

    def charge_later(self, buckets: list[Bucket], record: RunRecord, reserved: float = 0.0) -> asyncio.Task[None]:
        """Add a finished run's tokens and cost to its windows, in a task (subscribers must not block)."""
        task = asyncio.get_running_loop().create_task(self.charge(buckets, record, reserved))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def charge(self, buckets: list[Bucket], record: RunRecord, reserved: float = 0.0) -> None:
        """Charge a finished run: its tokens, and its cost less what admission `reserved` (a refund when it cost
        less)."""
        now = self.clock()
        spent = {"tokens": float(record.total_usage().total_tokens)}
        if any(b.limits.budgeted for b in buckets):
            spent["cost_day"] = spent["cost_month"] = self.run_cost(record) - reserved
        amounts = []
        for bucket in buckets:
            for kind, _ in bucket.kinds():
                amount = spent.get(kind, 0.0)
                if amount != 0:
                    span = window(kind, now, self.window_seconds)
                    amounts.append((self._key(bucket, kind, span.id), amount, math.ceil(span.reset) + _MARGIN))
        if amounts:
            try:
                await self.counters.charge(amounts)
            except Exception as exc:
                self._failed("charge", exc)

    async def usage(self, caller: str) -> list[Usage]:
        """A key's limits and their current windows (the usage endpoint); raises what the counters raise."""
        bucket = self._keys.get(caller)
        if bucket is None:
            return []
        now = self.clock()
        spans = [(kind, limit, window(kind, now, self.window_seconds)) for kind, limit in bucket.kinds()]
        values = await self.counters.read([self._key(bucket, kind, span.id) for kind, _, span in spans])
        return [Usage(kind, limit, used, span.reset) for (kind, limit, span), used in zip(spans, values, strict=True)]

    async def aclose(self) -> None:
        """Let the charges under way finish, then close the counters."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.counters.aclose()

    def _key(self, bucket: Bucket, kind: Kind, window_id: str) -> str:
        return f"{self._prefix}:{bucket.id}:{kind}:{window_id}"

    def _failed(self, what: str, exc: Exception) -> None:
        mode = "open" if self.fail_open else "closed"
        logger.warning(
            "limits: the counters could not %s (%s: %s); limits.on_error = %r", what, type(exc).__name__, exc, mode
        )
        if self._on_error is not None:
            self._on_error(mode)
        if not self.fail_open and what == "admit":
            raise Overloaded(
                "The server cannot check its rate limits right now (their store is unreachable), so it refuses new "
                'requests (limits.on_error = "closed"). Retry later.',
                code="limits_unavailable",
                headers={"retry-after": "1"},
            ) from None


def rate_headers(states: Sequence[Usage]) -> dict[str, str]:
    """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, from the tightest limit of each."""
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        found = [s for s in states if s.kind == kind]
        if found:
            tightest = min(found, key=lambda s: s.remaining)
            headers[f"x-ratelimit-limit-{kind}"] = _number(tightest.limit)
            headers[f"x-ratelimit-remaining-{kind}"] = _number(tightest.remaining)
            headers[f"x-ratelimit-reset-{kind}"] = reset_text(tightest.reset)
    return headers


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _ms(seconds: float) -> str:
    return str(max(1, math.ceil(seconds * 1000)))


def _amount(kind: Kind, limit: float) -> str:
    if kind == "requests":
        return f"{_number(limit)} requests per window"
    if kind == "tokens":
        return f"{_number(limit)} tokens per window"
    return f"a budget of {_number(limit)} per {'day' if kind == 'cost_day' else 'month'}"
