"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a run reports as it goes, as typed events, and the record folded from them.

A run publishes, in order: `RunStarted`; for each stage call `StageStarted` then `StageFinished` (target,
attempts, usage, time, output or error) — a stage that ran another served model's workflow (a child run, with
events of its own) publishes `Nested` with the child's record first; `Noted` for each value a workflow reports
(`intermediate` keys);
`AnswerChunks` while a streamed final answer is relayed; and `RunFinished` with the status
(`ok | degraded | error | cancelled`). Subscribers get every event; the `adapter_critic` response extension,
and every other view of a run, is built from the `RunRecord` these events fold into — there is no second
bookkeeping.

The events are frozen msgspec Structs, not dataclasses: a run makes five or more of them and a stream one per
upstream read, and a Struct is made in C (a frozen dataclass sets each field through `object.__setattr__`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from .core import Answer, Usage
from .errors import APIError, UpstreamError
from .pricing import CallCost, rounded

Status = Literal["running", "ok", "degraded", "error", "cancelled"]
# A value in the extension's `intermediate`: mostly text (a draft, a critique), or JSON data a workflow reports
# (a panel's critiques by lens, best-of-n's candidates, its judgments and the chosen index).
Value = str | int | float | bool | list[Any] | dict[str, Any]


class RunStarted(msgspec.Struct, frozen=True):
    run_id: str
    served_model: str
    mode: str
    stream: bool
    parent: str | None = None  # a child run: the run whose stage it is (its `parent_stage`)
    parent_stage: str | None = None
    cached_from: str | None = None  # a cache hit: the run whose answer it gives again (it calls no upstream)


class StageStarted(msgspec.Struct, frozen=True):
    stage: str
    target: str  # `model@base_url` of the primary target
    messages: Any = None  # the messages the call sends (as the workflow built them)


class Attempt(msgspec.Struct, frozen=True):
    """One attempt of a stage call: who was asked and, when it failed, why."""

    target: str
    error: UpstreamError | None = None


class StageFinished(msgspec.Struct, frozen=True):
    stage: str
    target: str  # the target that answered, or the last one tried
    attempts: tuple[Attempt, ...]
    usage: Usage  # summed over every attempt, failed ones included when their upstream reported usage
    elapsed_ms: float
    output: str | None = None
    error: UpstreamError | None = None
    reported: bool = True  # False: no attempt's upstream reported usage (the counts are zeros, not measurements)
    finish_reason: str | None = None  # why the answering model stopped (`stop`, `length`, `tool_calls`, …)
    cost: CallCost | None = None  # what the call cost (`pricing`); None when no prices are configured
    child: str | None = None  # the run id of the served model's run this stage call was (no upstream call of its own)


class Nested(msgspec.Struct, frozen=True):
    """A stage call ran another served model's workflow: its run's record (the child's own events went to its own
    subscribers), published before the stage's `StageFinished`, whose usage and cost are the child's totals."""

    stage: str
    record: RunRecord


class Noted(msgspec.Struct, frozen=True):
    """A value the workflow reports in the extension's `intermediate` (a draft, a critique, a reason)."""

    key: str
    value: Value


class AnswerChunks(msgspec.Struct, frozen=True):
    """Upstream `chat.completion.chunk` payloads of a streamed final answer that arrived together.

    `payloads` go to the client in order; `finish` is the chunk carrying `finish_reason`, which the client
    gets last, with the run's tail; `usage`, what the call's upstream reported so far (an upstream may report
    its input tokens as it starts)."""

    stage: str
    payloads: list[bytes]
    finish: bytes | None = None
    usage: Usage | None = None
    # Instead of `payloads`, the upstream's read as it came (`upstream.sse.iter_batches(whole=True)`): whole events,
    # each one token chunk of the upstream's `shape` (`protocols.openai.shape`: head, text, tail). A chat-completions
    # client gets it with our head and tail (`protocols.openai.chunks.ChunkWriter.spliced`); any other renderer, its
    # payloads (`payloads_of`).
    raw: bytes | None = None
    shape: tuple[bytes, bytes] = (b"", b"")
    # With `raw` whole events: their texts, as JSON string bodies (`protocols.openai.shape.bodies`), which the relay
    # found and the splice puts our head and tail around.
    bodies: list[bytes] | None = None
    # 0: `raw` is whole events. An event passed on in pieces as it arrives (`upstream.sse.Piece`) comes as 1, its
    # beginning (with the shape's head), 2, more of its text, and 3, its end (with the shape's tail).
    part: int = 0


def payloads_of(raw: bytes) -> list[bytes]:
    """The payloads of whole events, each one `data: ` line and a blank one (`AnswerChunks.raw`)."""
    return [line[6:] for line in raw.split(b"\n\n")[:-1]]


class RunFinished(msgspec.Struct, frozen=True):
    status: Status
    record: RunRecord
    error: APIError | None = None


Event = RunStarted | StageStarted | StageFinished | Nested | Noted | AnswerChunks | RunFinished
# Called with every event, in order, on the request's task: it must not block (a store queues, a counter counts).
Subscriber = Callable[[Event], None]


@dataclass(slots=True)
class StageRecord:
    """One stage as the record holds it: every call of it summed (an adapter retried is one stage)."""

    target: str
    usage: Usage = field(default_factory=Usage)
    elapsed_ms: float = 0.0
    calls: int = 0
    attempts: int = 0  # attempts over every call: `attempts - calls` were retries or fallbacks
    answered: bool = False
    reported: bool = False
    cost: float | None = 0.0  # over every call, when the run is priced; None: unknown (`pricing`)


@dataclass(slots=True)
class RunRecord:
    """A run so far, folded from its events (`apply`)."""

    run_id: str
    served_model: str
    mode: str
    started: float = field(default_factory=time.perf_counter)
    stages: dict[str, StageRecord] = field(default_factory=dict)
    intermediate: dict[str, Value] = field(default_factory=dict)
    answer: Answer = field(default_factory=Answer)
    degraded: bool = False
    status: Status = "running"
    streamed: bool = False  # an `AnswerChunks` went to the client
    currency: str | None = None  # the prices' currency; None: no prices are configured, no cost is reported
    ended: float | None = None  # when it finished (perf_counter)
    parent: str | None = None  # a child run: its parent run's id
    nested: dict[str, list[RunRecord]] = field(default_factory=dict)  # the child runs of each stage, in order
    cached_from: str | None = None  # a cache hit: the run whose answer this one gives again (`cache.entry`)

    def apply(self, event: Event) -> None:
        kind = type(event)
        if kind is StageFinished:
            assert isinstance(event, StageFinished)
            stage = self.stages.get(event.stage)
            if stage is None:
                stage = self.stages[event.stage] = StageRecord(event.target)
            stage.target = event.target
            stage.usage.add(event.usage)
            stage.elapsed_ms += event.elapsed_ms
            stage.calls += 1
            stage.attempts += len(event.attempts)
            stage.answered = event.error is None
            stage.reported = stage.reported or event.reported
            cost = event.cost
            if cost is not None and stage.cost is not None:
                stage.cost = None if cost.amount is None else stage.cost + cost.amount
            if event.error is not None:
                self.intermediate.pop(event.stage, None)  # a failed stage's own output key is absent
        elif kind is Noted:
            assert isinstance(event, Noted)
            self.intermediate[event.key] = event.value
        elif kind is AnswerChunks:
            self.streamed = True
        elif kind is RunFinished:
            assert isinstance(event, RunFinished)
            self.status = event.status
            self.degraded = event.status == "degraded"
            self.ended = time.perf_counter()
        elif kind is Nested:
            assert isinstance(event, Nested)
            self.nested.setdefault(event.stage, []).append(event.record)

    def elapsed_ms(self) -> float:
        return ((self.ended or time.perf_counter()) - self.started) * 1000

    def total_usage(self) -> Usage:
        total = Usage()
        for stage in self.stages.values():
            total.add(stage.usage)
        return total

    def call_cost(self) -> CallCost | None:
        """What the run cost as one stage call of its parent's (a child run): None when no prices are configured, an
        unknown amount when any of its stages' cost is unknown."""
        cost = self.cost()
        return None if cost is None else CallCost(cost.currency, cost.total)

    def cost(self) -> Cost | None:
        """What the run cost so far, per stage and in total; None when no prices are configured."""
        if self.currency is None:
            return None
        stages = {name: None if s.cost is None else rounded(s.cost) for name, s in self.stages.items()}
        unknown = [name for name, amount in stages.items() if amount is None]
        known = rounded(sum(amount for amount in stages.values() if amount is not None))
        return Cost(self.currency, stages, None if unknown else known, known, unknown)


class Tokens(msgspec.Struct, omit_defaults=True):
    """Usage per stage and in total. `unreported` names the stages whose upstream reported no usage (they count
    zeros, not measurements); `lower_bound` is then true: the real total is at least `total`."""

    stages: dict[str, Usage]
    total: Usage
    unreported: list[str] = []
    lower_bound: bool = False


class Cost(msgspec.Struct):
    """What a run cost, in `currency` (docs/guides/cost.md): per stage (`null`: unknown — its model has no price, or
    its upstream did not say what it used) and in `total` (`null` when any stage's is unknown). `total_known` is the
    sum of the known stages' costs, a lower bound of the real total when `unknown_stages` names any."""

    currency: str
    stages: dict[str, float | None]
    total: float | None
    total_known: float
    unknown_stages: list[str]


class CacheHit(msgspec.Struct, kw_only=True):
    """An answer given again from the exact-match cache (docs/guides/cache.md): `run_id` is the run that made it."""

    hit: bool = True
    run_id: str


class Extension(msgspec.Struct, omit_defaults=True):
    """The `adapter_critic` object of a response (docs/reference/http.md)."""

    mode: str
    intermediate: dict[str, Value]
    tokens: Tokens
    timings_ms: dict[str, float]
    degraded: bool = False
    targets: dict[str, str] = {}  # stage -> `model@base_url` that answered it (a fallback, after a failure)
    run_id: str = ""  # the run's id: its record in the run store, `GET /runs/{run_id}`
    cost: Cost | None = None  # what the run cost; left out when no prices are configured
    # Stages that ran another served model's workflow: each call's child run as an extension of its own, in order
    # (its `served_model` named); the stage's tokens, time and cost in this one are the sum over its children.
    nested: dict[str, list[Extension]] = {}
    served_model: str = ""  # set on a child run's extension only (in `nested`)
    cache: CacheHit | None = None  # a cache hit's: the run whose answer this is (the rest is that run's extension)


def _tokens(record: RunRecord, stages: dict[str, Usage]) -> Tokens:
    unreported = [name for name, stage in record.stages.items() if not stage.reported]
    return Tokens(stages=stages, total=record.total_usage(), unreported=unreported, lower_bound=bool(unreported))


def extension(record: RunRecord, *, child: bool = False) -> Extension:
    """The response extension of a finished (or finishing) run; `child`: a child run's, inside its parent's."""
    stages = {name: stage.usage for name, stage in record.stages.items()}
    timings = {name: round(stage.elapsed_ms, 3) for name, stage in record.stages.items()}
    timings["total"] = round(record.elapsed_ms(), 3)
    return Extension(
        mode=record.mode,
        intermediate=record.intermediate,
        tokens=_tokens(record, stages),
        timings_ms=timings,
        degraded=record.degraded,
        targets={name: stage.target for name, stage in record.stages.items() if stage.answered},
        run_id=record.run_id,
        cost=record.cost(),
        nested={stage: [extension(run, child=True) for run in runs] for stage, runs in record.nested.items()},
        served_model=record.served_model if child else "",
        cache=None if record.cached_from is None else CacheHit(run_id=record.cached_from),
    )
