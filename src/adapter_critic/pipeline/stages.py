"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`StageCalls`: every upstream call of a run, as a stage — retried and fallen back within the request deadline
(`upstream.retry`), reported as `StageStarted`/`StageFinished` with every attempt, its error and the usage of
every attempt that reported any, and, when the run is priced, what the call cost (`pricing`)."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import msgspec

from ..core import Completion, StageTarget, Usage
from ..errors import UpstreamError
from ..events import Attempt, Event, RunRecord, StageFinished, StageStarted
from ..pricing import CostTally, PriceTable
from ..upstream.client import Upstream
from ..upstream.retry import RetryPolicy, call_with_retries

_T = TypeVar("_T")
# Request fields that only make sense for the client's own connection, never for a stage call.
_STREAM_FIELDS = ("stream", "stream_options")


class StageCalls:
    """The stage calls of one run; `finished` keeps each stage's last `StageFinished`."""

    def __init__(
        self,
        upstream: Upstream,
        policy: RetryPolicy,
        publish: Callable[[Event], None],
        *,
        request_options: dict[str, Any],
        request_timeout: float | None,
        max_concurrent_calls: int | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.upstream, self.policy, self.publish = upstream, policy, publish
        self.prices = prices  # None: no prices configured, no cost counted
        # `max_concurrent_calls_per_run`: stage calls made at once (a panel's lenses, best-of-n's candidates) wait
        # for a slot; a wait before a retry holds none. Made by the first such calls (`at_once`): a run whose calls
        # all come one after another pays nothing for it.
        self.max_concurrent_calls = max_concurrent_calls
        self.limiter: anyio.CapacityLimiter | None = None
        self.request_options = request_options
        self.request_timeout = request_timeout
        # `request_timeout_seconds`: every stage call (retries and backoff waits included) is cancelled at this time.
        self.deadline = math.inf if request_timeout is None else anyio.current_time() + request_timeout
        self.finished: dict[str, StageFinished] = {}

    def share(self, parent: StageCalls) -> None:
        """A child run's calls (a stage run by another served model) end at its parent's deadline and share its cap."""
        self.deadline, self.request_timeout = parent.deadline, parent.request_timeout
        self.limiter = parent.limiter

    def at_once(self) -> None:
        """Stage calls are about to be made at once: from now on they share the run's cap."""
        if self.limiter is None and self.max_concurrent_calls:
            self.limiter = anyio.CapacityLimiter(self.max_concurrent_calls)

    async def complete(
        self, stage: str, target: StageTarget, messages: Any, *, api: bool, options: Mapping[str, Any] | None = None
    ) -> Completion:
        """A plain call: `target`'s options, the request's over them for an API-stage call (`api`), and `options`
        (a workflow's own, e.g. sampling settings) over those."""
        request_options = self.request_options if api else None

        async def attempt(to: StageTarget) -> Completion:
            body = stage_body(to, messages, request_options)
            if options:
                body.update(options)
            return await self.upstream.complete(stage, to, body)

        return await self.call(stage, target, attempt, lambda c: c.usage, messages=messages)

    async def call(
        self,
        stage: str,
        target: StageTarget,
        attempt: Callable[[StageTarget], Awaitable[_T]],
        usage_of: Callable[[_T], Usage | None],
        may_retry: Callable[[], bool] = lambda: True,
        *,
        messages: Any = None,
        child: RunRecord | None = None,
        partial: Callable[[], Usage] | None = None,
    ) -> _T:
        """One stage call: `attempt` with retries and fallbacks within the request deadline, reported as
        `StageStarted`/`StageFinished` with every attempt, and the usage of every attempt that reported any. `child`
        is the record of the child run a stage run by another served model is: the stage's cost is that run's.
        `partial` says what an attempt cancelled midway (its client gone) spent so far (default: the estimate of its
        prompt, `messages`): counted, as not reported."""
        self.publish(StageStarted(stage, target.label, messages))
        attempts: list[Attempt] = []
        usage = Usage()
        reported = False
        output: str | None = None
        finish: str | None = None
        error: UpstreamError | None = None
        answered = target
        tally = CostTally(self.prices) if self.prices is not None and child is None else None

        async def counted(to: StageTarget) -> _T:
            nonlocal reported
            if tally is not None:
                tally.pending = True
            try:
                if self.limiter is None or to.served is not None:  # a child run's own calls take the slots
                    result = await attempt(to)
                else:
                    async with self.limiter:
                        result = await attempt(to)
            except UpstreamError as exc:
                attempts.append(Attempt(to.label, exc))
                if exc.usage is not None:
                    usage.add(exc.usage)
                    reported = True
                if tally is not None and exc.usage is None and exc.kind == "status":
                    tally.refused()
                elif tally is not None:
                    tally.spent(to.model, exc.usage)
                raise
            except anyio.get_cancelled_exc_class():
                # The upstream worked for it all the same: what it spent is counted (a plain call: its prompt).
                spent = partial() if partial is not None else estimated(messages, "")
                usage.add(spent)
                if tally is not None:
                    tally.spent(to.model, spent)
                raise
            attempts.append(Attempt(to.label))
            return result

        began = time.perf_counter()
        try:
            if self.deadline == math.inf:  # no request deadline: no cancel scope to pay for
                result, answered = await call_with_retries(stage, target, counted, self.policy, may_retry=may_retry)
            else:
                with anyio.CancelScope(deadline=self.deadline) as scope:
                    result, answered = await call_with_retries(stage, target, counted, self.policy, may_retry=may_retry)
                if scope.cancelled_caught:
                    # The deadline passed: the call (or the wait before a retry) was cancelled. A reviewer stage
                    # may still degrade to the draft, so this is the stage's failure like any other timeout.
                    error = UpstreamError(
                        stage=stage,
                        target=(attempts[-1].target if attempts else target.label),
                        kind="timeout",
                        detail=f"was cancelled: the request did not finish within request_timeout_seconds "
                        f"({self.request_timeout} s).",
                        usage=usage if reported else None,
                    )
                    raise error
            spent = usage_of(result)
            if spent is not None:
                usage.add(spent)
                reported = True
            if tally is not None:
                tally.spent(answered.model, spent)
            content = getattr(result, "content", None)  # a completion's or a relayed stream's answer text
            output = content if isinstance(content, str) and content else None
            reason = getattr(result, "finish_reason", None)
            finish = reason if isinstance(reason, str) else None
            return result
        except UpstreamError as exc:
            error = exc
            raise
        finally:
            label = answered.label if error is None else (attempts[-1].target if attempts else target.label)
            elapsed = (time.perf_counter() - began) * 1000
            cost = child.call_cost() if child is not None else tally.result() if tally is not None else None
            child_id = None if child is None else child.run_id
            self.finished[stage] = StageFinished(
                stage, label, tuple(attempts), usage, elapsed, output, error, reported, finish, cost, child_id
            )
            self.publish(self.finished[stage])


def stage_body(target: StageTarget, messages: Any, request_options: dict[str, Any] | None) -> dict[str, Any]:
    """The body of a plain call to `target`: its own options, with the request's laid over them for an API-stage
    call (`request_options`; the request wins) — reviewers never get the client's (no tools, no response_format)."""
    options = {**target.options, **request_options} if request_options is not None else dict(target.options)
    for name in _STREAM_FIELDS:
        options.pop(name, None)
    options["model"] = target.model
    options["messages"] = messages
    return options


def estimated(messages: Any, answer: str) -> Usage:
    """Tokens estimated at 4 characters each — the messages' JSON and the answer's text — for a call whose upstream
    never said (a client gone before its usage came)."""
    prompt = math.ceil(len(msgspec.json.encode(messages)) / 4)
    completion = math.ceil(len(answer) / 4)
    return Usage(prompt, completion, prompt + completion)
