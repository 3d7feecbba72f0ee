"""The three workflows — direct, adapter, critic — as sequences of upstream stage calls (SPEC §5).

Each run fills an `Outcome`: the answer, every stage's output, tokens and wall-clock time, and
whether a reviewer failure degraded the answer to the draft.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import msgspec

from ._config import Mode
from ._edits import EditError, review
from ._exceptions import UpstreamError, UpstreamTimeout
from ._prompts import (
    adapter_messages,
    adapter_retry_messages,
    critic_messages,
    draft_as_text,
    render_tool_calls,
    second_pass_messages,
)
from ._request import ChatRequest
from ._resolve import Plan, StageTarget
from ._retry import RetryPolicy, call_with_retries
from ._upstream import Completion, Upstream, Usage, relay_first_call_error

logger = logging.getLogger("adapter_critic")

# Request fields that only make sense for the client's own connection, never for a stage call.
_STREAM_FIELDS = ("stream", "stream_options")
# Stages calling the API target (they get the request's options); the others are reviewers.
_API_STAGES = frozenset({"api", "api_draft", "api_final"})

_T = TypeVar("_T")
Emit = Callable[[bytes], Awaitable[None]]


@dataclass(slots=True)
class Outcome:
    """What a workflow produced: the answer plus everything the `adapter_critic` extension reports."""

    mode: Mode
    content: str | None = None
    tool_calls: list[Any] | None = None
    finish_reason: str | None = None
    intermediate: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    degraded: bool = False
    targets: dict[str, str] = field(default_factory=dict)  # stage -> `model@base_url` of the target that answered

    def spent(self, stage: str, began: float) -> None:
        """Count the wall-clock time since `began` (a `perf_counter` reading) in `stage`'s timing."""
        self.timings_ms[stage] = self.timings_ms.get(stage, 0.0) + (time.perf_counter() - began) * 1000

    def answer_with(self, completion: Completion) -> None:
        self.content = completion.content
        self.tool_calls = completion.tool_calls
        self.finish_reason = completion.finish_reason


@dataclass(frozen=True, slots=True)
class FinalCall:
    """The last upstream call of a run, whose answer is the client's (streamed live when streaming)."""

    stage: str
    target: StageTarget
    body: dict[str, Any]
    first: bool  # also the first API call: its failure is the request's failure, never degraded


class Run:
    """One request's run of its plan; holds the outcome being filled in."""

    def __init__(
        self,
        plan: Plan,
        request: ChatRequest,
        upstream: Upstream,
        policy: RetryPolicy | None = None,
        request_timeout: float | None = None,
    ) -> None:
        self.plan = plan
        self.request = request
        self.upstream = upstream
        self.outcome = Outcome(mode=plan.mode)
        self.policy = policy or RetryPolicy()
        self.request_timeout = request_timeout
        # `request_timeout_seconds`: every stage call (retries and backoff waits included) is cancelled at this time.
        self.deadline = math.inf if request_timeout is None else anyio.current_time() + request_timeout

    async def run(self) -> Outcome:
        """Run every stage as a plain call and return the outcome."""
        final = await self.prepare()
        if final is not None:
            if final.first:
                answer: Completion | None = await self._first_call(final.stage, final.body)
            else:
                answer = await self._review_call(final.stage, final.target, final.body)
            if answer is not None:
                self.finish(answer.content, answer.tool_calls, answer.finish_reason)
        return self.outcome

    async def prepare(self) -> FinalCall | None:
        """Run the stages before the last one; return the last call still to make (None: the answer is known).

        Streaming makes the returned call as a stream; `run` makes it as a plain call.
        """
        if self.plan.mode == "direct":
            return FinalCall("api", self.plan.api, self._api_body(self.request.messages_json), first=True)
        if self.plan.mode == "adapter":
            await self._adapter()
            return None
        return await self._critic()

    def finish(self, content: str | None, tool_calls: list[Any] | None, finish_reason: str | None) -> None:
        """Record the last call's answer."""
        out = self.outcome
        out.content, out.tool_calls, out.finish_reason = content, tool_calls, finish_reason
        out.intermediate["api" if out.mode == "direct" else "final"] = content or ""

    def degrade(self, stage: str, error: UpstreamError) -> None:
        """A reviewer stage failed and `on_review_error = "draft"`: the draft stands as the answer (§5)."""
        logger.warning("%s stage failed, answering with the draft: %s", stage, error.message)
        self.outcome.degraded = True
        self.outcome.intermediate[f"{stage}_error"] = error.message
        self.outcome.intermediate["final"] = self.outcome.content or ""

    # -- workflows -------------------------------------------------------------------------------
    async def _adapter(self) -> None:
        plan, out = self.plan, self.outcome
        assert plan.adapter is not None
        draft = await self._first_call("api", self._api_body(self.request.messages_json))
        out.answer_with(draft)
        draft_text = draft.content or ""
        self._record_draft(draft)

        messages = adapter_messages(
            plan.adapter_system_prompt, self.request.messages, draft_as_text(draft.content, draft.tool_calls)
        )
        body = _reviewer_body(plan.adapter, messages)
        rejection: str | None = None
        for attempt in range(plan.max_adapter_retries + 1):
            completion = await self._review_call("adapter", plan.adapter, body)
            if completion is None:
                out.intermediate.pop("adapter", None)  # §5: a failed stage's own output key is absent
                break
            reply = completion.content or ""
            out.intermediate["adapter"] = reply
            try:
                final = review(draft_text, reply)
            except EditError as exc:
                rejection = str(exc)
                logger.info("adapter reply %d rejected: %s", attempt + 1, rejection)
                body = _reviewer_body(plan.adapter, adapter_retry_messages(messages, reply, rejection))
                messages = body["messages"]
                continue
            rejection = None
            if final != draft_text:
                out.content = final
            break
        if rejection is not None:
            out.intermediate["adapter_rejection_reason"] = rejection
        out.intermediate["final"] = out.content or ""

    async def _critic(self) -> FinalCall | None:
        plan, out = self.plan, self.outcome
        assert plan.critic is not None
        draft = await self._first_call("api_draft", self._api_body(self.request.messages_json))
        out.answer_with(draft)
        self._record_draft(draft)
        draft_text = draft_as_text(draft.content, draft.tool_calls)

        critic_body = _reviewer_body(
            plan.critic, critic_messages(plan.critic_system_prompt, self.request.messages, draft_text)
        )
        critique = await self._review_call("critic", plan.critic, critic_body)
        if critique is None:
            return None
        out.intermediate["critic"] = critique.content or ""
        second_messages = second_pass_messages(self.request.raw_messages, draft_text, critique.content or "")
        return FinalCall("api_final", plan.api, self._api_body(second_messages), first=False)

    # -- stage calls -----------------------------------------------------------------------------
    def _record_draft(self, draft: Completion) -> None:
        self.outcome.intermediate["api_draft"] = draft.content or ""
        rendered = render_tool_calls(draft.tool_calls)
        if rendered:
            self.outcome.intermediate["api_draft_tool_calls"] = rendered

    def _api_body(self, messages: list[Any] | msgspec.Raw, target: StageTarget | None = None) -> dict[str, Any]:
        """An API-stage body: the target's options with the request's laid over them (the request wins)."""
        target = target or self.plan.api
        return _stage_body(target, messages, {**target.options, **self.request.options})

    def _body_on(self, stage: str, primary: StageTarget, body: dict[str, Any], target: StageTarget) -> dict[str, Any]:
        """`body`, made for the stage's `primary` target, as `target` (a fallback) gets it: its model, its options."""
        if target is primary:
            return body
        messages = body["messages"]
        return self._api_body(messages, target) if stage in _API_STAGES else _reviewer_body(target, messages)

    async def retrying(
        self,
        stage: str,
        target: StageTarget,
        attempt: Callable[[StageTarget], Awaitable[_T]],
        *,
        may_retry: Callable[[], bool] = lambda: True,
    ) -> _T:
        """`attempt` with retries and fallbacks (`_retry`), within the request deadline; records who answered."""
        with anyio.CancelScope(deadline=self.deadline):
            result, answered = await call_with_retries(stage, target, attempt, self.policy, may_retry=may_retry)
            self.outcome.targets[stage] = answered.label
            return result
        # The deadline passed: the call (or the wait before a retry) was cancelled. A reviewer stage may still
        # degrade to the draft (§5), so this is the stage's failure like any other timeout.
        raise UpstreamTimeout(
            f"The request did not finish within request_timeout_seconds ({self.request_timeout} s); "
            f"the {stage} stage ({target.label}) was cancelled.",
            stage=stage,
        )

    async def stream_final(
        self, final: FinalCall, relay: Callable[[FinalCall, Emit], Awaitable[None]], emit: Emit
    ) -> None:
        """Make the final call as a stream through `relay`, retried and fallen back like any stage call, but only
        while nothing of it was relayed: once a byte of the answer went out, a failure is final (§8)."""
        relayed = False

        async def emit_relayed(data: bytes) -> None:
            nonlocal relayed
            relayed = True
            await emit(data)

        async def attempt(target: StageTarget) -> None:
            body = self._body_on(final.stage, final.target, final.body, target)
            # Recorded up front: the extension rides on the stream's last chunk, sent before `relay` returns.
            self.outcome.targets[final.stage] = target.label
            try:
                await relay(FinalCall(final.stage, target, body, final.first), emit_relayed)
            except BaseException:
                del self.outcome.targets[final.stage]
                raise

        await self.retrying(final.stage, final.target, attempt, may_retry=lambda: not relayed)

    async def _first_call(self, stage: str, body: dict[str, Any]) -> Completion:
        """The first API call: its failure is always the request's failure, its 4xx relayed as is."""
        try:
            return await self._call(stage, self.plan.api, body)
        except UpstreamError as exc:
            raise relay_first_call_error(exc) from None

    async def _review_call(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion | None:
        """A later stage's call; on failure, either the whole request fails or the draft stands (§5)."""
        try:
            return await self._call(stage, target, body)
        except UpstreamError as exc:
            if self.plan.on_review_error == "fail":
                raise
            self.degrade(stage, exc)
            return None

    async def _call(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion:
        out = self.outcome
        usage = out.usage.setdefault(stage, Usage())
        started = time.perf_counter()
        try:
            completion = await self.retrying(
                stage, target, lambda to: self.upstream.complete(stage, to, self._body_on(stage, target, body, to))
            )
        finally:
            out.spent(stage, started)
        usage.add(completion.usage)
        return completion


def _reviewer_body(target: StageTarget, messages: list[Any]) -> dict[str, Any]:
    """Reviewers get only their own target's options, never the client's (no tools, no response_format)."""
    return _stage_body(target, messages, dict(target.options))


def _stage_body(target: StageTarget, messages: list[Any] | msgspec.Raw, options: dict[str, Any]) -> dict[str, Any]:
    """`options` (a fresh dict, changed in place) as the body of a plain call to `target` with `messages`."""
    for name in _STREAM_FIELDS:
        options.pop(name, None)
    options["model"] = target.model
    options["messages"] = messages
    return options
