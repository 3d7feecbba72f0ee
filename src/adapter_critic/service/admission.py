"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Admission of chat requests: the overload limit, and the count of requests in flight for a graceful shutdown.

With `max_concurrent_requests` set, at most that many chat requests run at once; up to `max_queued_requests`
more wait, each up to `queue_timeout_seconds`, for a slot. A request that finds the queue full is refused at
once, and one that waited too long then, both with 503 and `Retry-After` — the number of requests running and
waiting is bounded, and none waits without bound. Requests that are refused never started, so the client may
retry them (no `x-should-retry: false`).

At shutdown, `drain` stops admitting (503 as well) and waits up to `shutdown_grace_seconds` for the requests
in flight to finish, so the upstream client is closed under none of them.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

import anyio

from ..errors import Overloaded

logger = logging.getLogger("adapter_critic")


class Gauge(Protocol):
    def inc(self, amount: float = 1) -> None: ...
    def dec(self, amount: float = 1) -> None: ...


class Admission:
    """Admits chat requests (`slot`) and waits for them at shutdown (`drain`); one per service."""

    def __init__(
        self, limit: int | None, queue_timeout: float, max_queued: int = 100, gauge: Gauge | None = None
    ) -> None:
        self.limit = limit
        self.queue_timeout = queue_timeout
        self.max_queued = max_queued
        self.queued = 0
        self.in_flight = 0
        self.closing = False
        self._semaphore: anyio.Semaphore | None = None
        self._idle: anyio.Event | None = None
        retry_after = str(max(1, math.ceil(queue_timeout)))
        self._busy_headers = {"retry-after": retry_after}
        self.gauge = gauge  # told of every request admitted and finished (the in-flight metric)
        self._slot = _Slot(self)

    def open(self) -> None:
        """Admit requests again (a lifespan that starts after an earlier shutdown)."""
        self.closing = False

    def slot(self) -> _Slot:
        """Hold a request slot for the block; raises `Overloaded` if none frees up in time, or while shutting down."""
        return self._slot

    async def admit(self) -> None:
        """Take a request slot (`slot`'s entry); `release` gives it back."""
        if self.closing:
            raise Overloaded(
                "The server is shutting down; retry on another instance.",
                code="shutting_down",
                headers={"retry-after": "1"},
            )
        semaphore = self._limiter()
        if semaphore is not None:
            try:
                semaphore.acquire_nowait()
            except anyio.WouldBlock:
                if self.queued >= self.max_queued:
                    raise Overloaded(
                        f"The server is busy: all {self.limit} request slots (max_concurrent_requests) are taken and "
                        f"{self.queued} requests already wait for one (max_queued_requests). Retry later.",
                        code="overloaded",
                        headers=self._busy_headers,
                    ) from None
                acquired = False
                self.queued += 1
                try:
                    with anyio.move_on_after(self.queue_timeout):
                        await semaphore.acquire()
                        acquired = True
                finally:
                    self.queued -= 1
                if not acquired:
                    raise Overloaded(
                        f"The server is busy: all {self.limit} request slots (max_concurrent_requests) stayed taken "
                        f"for {self.queue_timeout} seconds (queue_timeout_seconds). Retry later.",
                        code="overloaded",
                        headers=self._busy_headers,
                    ) from None
        self.in_flight += 1
        if self.gauge is not None:
            self.gauge.inc()

    def release(self) -> None:
        """Give back a slot `admit` took."""
        self.in_flight -= 1
        if self.gauge is not None:
            self.gauge.dec()
        if self._semaphore is not None:
            self._semaphore.release()
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def drain(self, grace: float) -> None:
        """Stop admitting, then wait up to `grace` seconds for the requests in flight to finish."""
        self.closing = True
        if self.in_flight == 0:
            return
        logger.info("shutting down: waiting up to %s s for %d request(s) in flight", grace, self.in_flight)
        self._idle = anyio.Event()
        with anyio.move_on_after(grace):
            await self._idle.wait()
        self._idle = None
        if self.in_flight:
            logger.warning(
                "shutting down with %d request(s) still in flight after shutdown_grace_seconds (%s s)",
                self.in_flight,
                grace,
            )

    def _limiter(self) -> anyio.Semaphore | None:
        # Made on first use, inside the event loop that serves the requests.
        if self.limit is not None and self._semaphore is None:
            self._semaphore = anyio.Semaphore(self.limit)
        return self._semaphore


class _Slot:
    """`Admission.slot`'s block: a slot taken on entry and given back on exit. It keeps nothing of its own, so one
    serves every request (no generator-based context manager made per request)."""

    __slots__ = ("admission",)

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def __aenter__(self) -> None:
        await self.admission.admit()

    async def __aexit__(self, *exc_info: object) -> None:
        self.admission.release()
