"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A stage run by another served model (`critic = { served = "demo-critic" }`, a chain's `draft`): its whole workflow
runs in-process as a child run of the stage's run — no HTTP hop (docs/guides/workflows.md#composing-workflows).

The child gets the stage's messages as its request (an API-stage call: with the client's options, as any API call;
a reviewer's: with none), runs under its served model's own plan and settings (a request's `x_adapter_critic` is the
parent's alone), within the parent's deadline, and is recorded as a run of its own linked to its parent. Its answer is
a `Completion` to the parent, with the child's total usage: the parent's accounting is the sum of its children's.
`Nesting` is what a run needs for that, given by the service that made the run (`http.chat`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import msgspec

from ..config.models import MAX_NESTING
from ..core import ChatRequest, Completion, Plan, StageTarget
from ..errors import ServerError, UpstreamError
from ..events import AnswerChunks, RunRecord, Subscriber
from ..request.decode import decode_request
from ..workflows import registry
from ..workflows.base import Workflow
from .stages import StageCalls

# Request fields that only make sense for the client's own connection (a child streams only through its parent).
_CONNECTION_FIELDS = ("stream", "stream_options")


class Run(Protocol):
    """What a stage run by another served model needs of the run it belongs to, and of the child run it makes
    (`pipeline.run.Run` is one): written here, so that this module need not import the run that imports it."""

    nesting: Nesting | None
    request: ChatRequest
    record: RunRecord
    calls: StageCalls
    children: int

    def note_child(self, stage: str, record: RunRecord) -> None: ...

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
    ) -> Run: ...

    async def execute(self, sink: Callable[[AnswerChunks], Awaitable[None]] | None = None) -> RunRecord: ...


@dataclass(frozen=True, slots=True)
class Nesting:
    """How a run runs a served model as one of its stages: the served model's plan (`plan_of`, resolved as for a
    request without overrides, with the caller's token where a target forwards it) and a child run's subscribers
    (`subscribers_of`: the service's, and its recorder when runs are recorded); `depth` is the run's own."""

    plan_of: Callable[[str], Plan]
    subscribers_of: Callable[[ChatRequest, Plan], Sequence[Subscriber]]
    depth: int = 0

    def child(self) -> Nesting:
        """The nesting of a child run, one level deeper; refused past `MAX_NESTING` (the config's checks keep every
        served model within it, so this is a last guard)."""
        if self.depth >= MAX_NESTING:
            raise ServerError(f"served models nest more than {MAX_NESTING} deep")
        return replace(self, depth=self.depth + 1)


def child_request(served_id: str, messages: Any, options: Mapping[str, Any]) -> ChatRequest:
    """The request a child run answers: the stage's messages (as the workflow built them: raw JSON, dicts or both)
    and `options`, decoded as a client's request would be."""
    fields = {key: value for key, value in options.items() if key not in _CONNECTION_FIELDS}
    fields["model"] = served_id
    fields["messages"] = messages
    return decode_request(msgspec.json.encode(fields))


def make_child(
    parent: Run, stage: str, target: StageTarget, messages: Any, child_id: str, *, api: bool, options: Any
) -> Run:
    """The run of the served model `target.served` as `parent`'s `stage`: a run of the same kind as its parent, with
    the stage's messages as its request, within the parent's deadline and cap on concurrent calls."""
    if parent.nesting is None or target.served is None:
        raise ServerError(f"the {stage} stage runs another served model, which this run cannot")
    nesting = parent.nesting.child()
    plan = nesting.plan_of(target.served)
    request = child_request(plan.served_id, messages, {**(parent.request.options if api else {}), **(options or {})})
    child = parent.child_run(
        registry.get(plan.mode),
        plan,
        request,
        run_id=child_id,
        subscribers=nesting.subscribers_of(request, plan),
        nesting=nesting,
        parent=(parent.record.run_id, stage),
    )
    child.calls.share(parent.calls)
    return child


async def run_child(
    parent: Run, child: Run, stage: str, sink: Callable[[AnswerChunks], Awaitable[None]] | None
) -> Completion:
    """Run `child` (`make_child`) as `parent`'s `stage` (the one attempt of its stage call), its final call streamed
    to `sink` when there is one. Its record goes to the parent (`Nested`) however it ends; a failure of its own is
    the stage's, with what it spent."""
    try:
        record = await child.execute(sink)
    except UpstreamError as exc:
        raise exc.evolve(usage=child.record.total_usage(), relay=False) from None
    finally:
        parent.note_child(stage, child.record)
    completion = Completion.of_answer(record.answer, record.total_usage())
    if not any(one.reported for one in record.stages.values()):
        completion.usage = None  # no stage of it reported usage: its zeros are not measurements
    return completion


async def call_served(
    parent: Run,
    stage: str,
    target: StageTarget,
    messages: Any,
    *,
    api: bool,
    options: Any = None,
    sink: Callable[[AnswerChunks], Awaitable[None]] | None = None,
) -> Completion:
    """`parent`'s `stage` run by the served model `target.served`: a child run, reported as one stage call whose
    usage and cost are the child's totals; its final call streams to `sink` when there is one."""
    parent.children += 1
    child_id = f"{parent.record.run_id}.{parent.children}"
    child = make_child(parent, stage, target, messages, child_id, api=api, options=options)

    async def attempt(to: StageTarget) -> Completion:
        return await run_child(parent, child, stage, sink)

    return await parent.calls.call(stage, target, attempt, lambda c: c.usage, messages=messages, child=child.record)
