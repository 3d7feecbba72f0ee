"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Run`: one request's run of its workflow, and the one owner of a run's policy.

The workflow decides its stages; the run makes every stage call (retries and fallbacks within the request
deadline), counts what each stage spent, degrades to the answer so far when a reviewer fails
(`on_review_error = "draft"`), and makes the final call — as a plain call, or streamed to an `AnswerSink` when
the client streams. Plain and streamed runs differ only in how the final call's answer reaches the client.

Everything that happens is published as an event (`events`); the run's `RunRecord` is the fold of them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from ..core import Answer, ChatRequest, Completion, FinalCall, Plan, StageTarget
from ..errors import APIError, UpstreamError
from ..events import (
    AnswerChunks,
    Event,
    Nested,
    Noted,
    RunFinished,
    RunRecord,
    RunStarted,
    StageFinished,
    Status,
    Subscriber,
    Value,
)
from ..pricing import PriceTable
from ..upstream.client import Upstream
from ..upstream.retry import RetryPolicy
from ..workflows.base import StageCall, StageFailed, Workflow
from ..workflows.prompts import LESSONS
from .nested import Nesting, call_served
from .relay import Relay, abandoned
from .stages import StageCalls, stage_body

logger = logging.getLogger("adapter_critic")


# Where a streamed final answer goes as it arrives (the client's stream writer).
AnswerSink = Callable[[AnswerChunks], Awaitable[None]]
# Told as each stage before the final call finishes, for a streaming client that asked for progress.
ProgressSink = Callable[[StageFinished], Awaitable[None]]


class Run:
    """One request's run of `workflow` on `plan`; `execute` drives it, the record holds what happened."""

    def __init__(
        self,
        workflow: Workflow,
        plan: Plan,
        request: ChatRequest,
        upstream: Upstream,
        policy: RetryPolicy,
        *,
        run_id: str,
        request_timeout: float | None = None,
        max_concurrent_calls: int | None = None,
        subscribers: Sequence[Subscriber] = (),
        prices: PriceTable | None = None,
        nesting: Nesting | None = None,
        parent: tuple[str, str] | None = None,
    ) -> None:
        self.workflow, self.plan, self.request = workflow, plan, request
        self.upstream, self.policy, self.prices = upstream, policy, prices
        self.record = RunRecord(run_id, plan.served_id, plan.mode, parent=parent[0] if parent else None)
        if prices is not None:
            self.record.currency = prices.currency
        self.subscribers = subscribers
        # Stages run by other served models (`pipeline.nested`): how, and this run's place (parent run id, stage).
        self.nesting, self.parent = nesting, parent
        self.children = 0  # child runs made so far (their ids count them: `<run id>.<n>`)
        self._degraded = False
        self._progress: ProgressSink | None = None
        self._progress_lock: anyio.Lock | None = None  # made when stage calls run at once
        # A closure, not the bound `_publish`: the stage calls holding the run would make every run cyclic garbage,
        # freed only by the garbage collector (a pause that grew with the runs between collections).
        self._publish = publisher(self.record, subscribers)
        self.calls = StageCalls(
            upstream,
            policy,
            self._publish,
            request_options=request.options,
            request_timeout=request_timeout,
            max_concurrent_calls=max_concurrent_calls,
            prices=prices,
        )

    # -- what a workflow sees (`workflows.base.RunContext`) ----------------------------------------
    @property
    def answer(self) -> Answer:
        return self.record.answer

    def set_answer(self, answer: Answer) -> None:
        self.record.answer = answer

    def note(self, key: str, value: Value) -> None:
        self._publish(Noted(key, value))

    def child_run(
        self,
        workflow: Workflow,
        plan: Plan,
        request: ChatRequest,
        *,
        run_id: str,
        subscribers: Sequence[Subscriber],
        nesting: Nesting,
        parent: tuple[str, str],
    ) -> Run:
        """A run of another served model as one of this run's stages (`pipeline.nested`): same upstream, retry
        policy and prices."""
        return Run(
            workflow, plan, request, self.upstream, self.policy, run_id=run_id, subscribers=subscribers,
            prices=self.prices, nesting=nesting, parent=parent,
        )  # fmt: skip

    def note_child(self, stage: str, record: RunRecord) -> None:
        """`stage` ran another served model: its run's record (`pipeline.nested.run_child`)."""
        self._publish(Nested(stage, record))

    def final(self, stage: str, messages: Any, *, first: bool = False, target: StageTarget | None = None) -> FinalCall:
        return FinalCall(stage, target or (self.plan.draft if first else self.plan.api), messages, first=first)

    async def first_call(self, stage: str, messages: Any) -> Completion:
        try:
            return await self._complete(stage, self.plan.draft, messages, api=True)
        except UpstreamError as exc:
            raise exc.evolve(relay=True) from None  # the client's own 4xx comes back as the upstream said it

    async def review_call(
        self, stage: str, target: StageTarget, messages: Any, *, api: bool = False
    ) -> Completion | None:
        try:
            return await self._complete(stage, target, messages, api=api)
        except UpstreamError as exc:
            self._degrade_or_raise(stage, exc)
            return None

    async def review_calls(self, calls: Sequence[StageCall], *, api: bool = False) -> list[Completion | StageFailed]:
        return await self._at_once(calls, api=api, required=False)

    async def api_calls(self, calls: Sequence[StageCall]) -> list[Completion | StageFailed]:
        return await self._at_once(calls, api=True, required=True)

    async def _at_once(
        self, calls: Sequence[StageCall], *, api: bool, required: bool
    ) -> list[Completion | StageFailed]:
        """`calls` concurrently (each within the run's cap; `api`: with the request's options), their answers in
        order. A failure is left out and the run degraded, or (`on_review_error = "fail"`) ends the others and fails
        the request; `required` calls that all fail are the request's failure, an upstream 4xx relayed as is."""
        results: list[Completion | StageFailed] = [StageFailed(call.stage, "not run") for call in calls]
        errors: dict[int, UpstreamError] = {}
        fail_fast = self.plan.on_review_error == "fail"
        if self._progress is not None and self._progress_lock is None:
            self._progress_lock = anyio.Lock()
        self.calls.at_once()

        async def one(index: int, call: StageCall, scope: anyio.CancelScope) -> None:
            try:
                results[index] = await self._complete(
                    call.stage, call.target, call.messages, api=api, options=call.options
                )
            except UpstreamError as exc:
                errors[index] = exc
                results[index] = StageFailed(call.stage, exc.message)
                if fail_fast:
                    scope.cancel()  # the request fails with this error: the other calls are not needed

        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(one, index, call, group.cancel_scope)
        failed = [result for result in results if isinstance(result, StageFailed)]
        if errors and (fail_fast or (required and len(failed) == len(results))):
            first = errors[min(errors)]  # the earliest call's (with fail_fast: the one that failed; the rest ended)
            raise first.evolve(relay=True) if api else first
        for failure in failed:
            logger.warning("%s stage failed and is left out: %s", failure.stage, failure.reason)
            self._degraded = True
        return results

    # -- driving the run ---------------------------------------------------------------------------
    async def execute(self, sink: AnswerSink | None = None, progress: ProgressSink | None = None) -> RunRecord:
        """Run the workflow; the final call goes to `sink` as a stream when there is one, and `progress` hears of
        each earlier stage as it finishes. Raises the `APIError` that ends the request; the record (and
        `RunFinished`) says how the run ended in every case."""
        self._progress = progress
        parent, parent_stage = self.parent or (None, None)
        started = RunStarted(
            self.record.run_id, self.plan.served_id, self.plan.mode, sink is not None, parent, parent_stage
        )
        self._publish(started)
        status: Status = "error"
        error: APIError | None = None
        lessons = LESSONS.set(self.plan.lessons) if self.plan.lessons or LESSONS.get() else None  # a child: its own
        if self.plan.lessons_version is not None:
            self.note("lessons_version", self.plan.lessons_version)
        if self.plan.route is not None:
            self.note("route", dict(self.plan.route))
        try:
            final = await self.workflow.run(self)
            if final is not None and sink is not None:
                await self._stream_final(final, sink)
            elif final is not None:
                if final.first:
                    answer: Completion | None = await self.first_call(final.stage, final.messages)
                else:
                    answer = await self.review_call(final.stage, final.target, final.messages, api=True)
                if answer is not None:
                    self.set_answer(Answer.of(answer))
            self.note(self.workflow.final_key, self.answer.content or "")
            status = "degraded" if self._degraded else "ok"
        except APIError as exc:
            error = exc
            raise
        except anyio.get_cancelled_exc_class():
            status = "cancelled"
            raise
        finally:
            if lessons is not None:
                LESSONS.reset(lessons)
            self._publish(RunFinished(status, self.record, error))
        return self.record

    def _degrade_or_raise(self, stage: str, error: UpstreamError) -> None:
        """A later stage failed: the request fails (`on_review_error = "fail"`), or the answer so far stands."""
        if self.plan.on_review_error == "fail":
            raise error
        logger.warning("%s stage failed, answering with the draft: %s", stage, error.message)
        self._degraded = True
        self.note(f"{stage}_error", error.message)

    async def _stream_final(self, final: FinalCall, sink: AnswerSink) -> None:
        """The final call as a stream, retried and fallen back like any stage call, but only while nothing of
        it was relayed: once a byte of the answer went out, a failure is final. A final call run by another served
        model streams that model's own final call through."""
        relayed = False

        def send(chunks: AnswerChunks) -> Awaitable[None]:  # the sink's own coroutine is awaited: no frame more
            nonlocal relayed
            relayed = True
            self._publish(chunks)
            return sink(chunks)

        relays: list[Relay] = []

        async def attempt(target: StageTarget) -> Relay:
            relay = Relay(final.stage, target, first=final.first, sink=send, secrets=self.upstream.secrets)
            relays.append(relay)
            body = stage_body(target, final.messages, self.request.options)
            try:
                async with self.upstream.stream(final.stage, target, body) as batches:
                    async for batch in batches:
                        await relay.feed(batch)
                await relay.close()
            except UpstreamError as exc:
                raise exc.evolve(usage=relay.usage) if relay.usage is not None else exc from None
            return relay

        try:
            if final.target.served is not None:
                completion = await call_served(self, final.stage, final.target, final.messages, api=True, sink=send)
                self.set_answer(Answer.of(completion))
                return
            relay = await self.calls.call(
                final.stage,
                final.target,
                attempt,
                lambda r: r.usage,
                lambda: not relayed,
                messages=final.messages,
                partial=lambda: abandoned(relays[-1] if relays else None, final.messages),
            )
        except UpstreamError as exc:
            if final.first:
                raise exc.evolve(relay=True) from None
            if relayed:
                raise
            self._degrade_or_raise(final.stage, exc)  # no answer content went out yet: the draft can still stand
            return
        self.set_answer(relay.answer())
        if relay.reasoning:
            self.note(f"{final.stage}_reasoning", relay.reasoning)

    # -- stage calls -------------------------------------------------------------------------------
    async def _complete(
        self, stage: str, target: StageTarget, messages: Any, *, api: bool, options: Any = None
    ) -> Completion:
        """A plain stage call (or another served model's run); a streaming client that asked for progress hears of it
        as it ends."""
        try:
            if target.served is None:
                completion = await self.calls.complete(stage, target, messages, api=api, options=options)
            else:
                completion = await call_served(self, stage, target, messages, api=api, options=options)
        except UpstreamError:
            await self._report(stage)
            raise
        if completion.choices[0].message.reasoning_content or completion.choices[0].message.reasoning:
            self.note(f"{stage}_reasoning", completion.reasoning or "")
        await self._report(stage)
        return completion

    async def _report(self, stage: str) -> None:
        """Tell the progress sink that `stage` finished; one at a time when stages run at once."""
        if self._progress is None:
            return
        if self._progress_lock is None:
            await self._progress(self.calls.finished[stage])
            return
        async with self._progress_lock:
            await self._progress(self.calls.finished[stage])


def publisher(record: RunRecord, subscribers: Sequence[Subscriber]) -> Callable[[Event], None]:
    """Publish a run's events: folded into its record, then given to each subscriber in turn."""

    def publish(event: Event) -> None:
        record.apply(event)
        for subscriber in subscribers:
            subscriber(event)

    return publish
