"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the cache keeps of a run, and the run it answers with again.

Not one protocol's bytes: the run's record as the renderers read it — the final answer (with the upstream's own
completion, which a plain chat-completions answer relays field by field), its `intermediate` values, and each
stage's target, usage, time and cost, child runs included. A hit rebuilds that record under its own run id and hands
it to the client's protocol's renderer, plain or streamed, exactly as a run's end is rendered: so the answer a client
gets from the cache is the one the run gave, in whatever protocol it asks in (docs/guides/cache.md says which fields
are fresh).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ..core import Answer, Usage
from ..events import RunRecord, StageRecord


class CachedStage(msgspec.Struct, forbid_unknown_fields=False):
    target: str
    usage: Usage
    elapsed_ms: float
    calls: int
    attempts: int
    answered: bool
    reported: bool
    cost: float | None


NULL = msgspec.Raw(b"null")  # no source (msgspec reads a `Raw` field whole, never as `Raw | None`)


class CachedAnswer(msgspec.Struct, omit_defaults=True):
    content: str | None = None
    tool_calls: list[Any] | None = None
    finish_reason: str | None = None
    more: list[CachedAnswer] = []
    source: msgspec.Raw = NULL  # the upstream's completion, as it sent it (valid JSON: it was read as one)
    edited: bool = False


class CachedRun(msgspec.Struct, omit_defaults=True):
    """A run's record as the cache keeps it; `run_id` is the run that made the answer."""

    run_id: str
    served_model: str
    mode: str
    elapsed_ms: float
    answer: CachedAnswer
    stages: dict[str, CachedStage] = {}
    intermediate: dict[str, Any] = {}
    currency: str | None = None
    nested: dict[str, list[CachedRun]] = {}
    created_at: float = 0.0  # Unix seconds


def _answer(answer: Answer) -> CachedAnswer:
    source = NULL if answer.source is None else msgspec.Raw(answer.source)
    more = [_answer(one) for one in answer.more]
    return CachedAnswer(answer.content, answer.tool_calls, answer.finish_reason, more, source, answer.edited)


def snapshot(record: RunRecord, *, created_at: float | None = None) -> CachedRun:
    """What the cache keeps of a finished run (made as it finishes: its record is not changed after)."""
    stages = {
        name: CachedStage(s.target, s.usage, s.elapsed_ms, s.calls, s.attempts, s.answered, s.reported, s.cost)
        for name, s in record.stages.items()
    }
    return CachedRun(
        record.run_id,
        record.served_model,
        record.mode,
        round(record.elapsed_ms(), 3),
        _answer(record.answer),
        stages,
        dict(record.intermediate),
        record.currency,
        {stage: [snapshot(child) for child in children] for stage, children in record.nested.items()},
        time.time() if created_at is None else created_at,
    )


def _given(answer: CachedAnswer) -> Answer:
    source = None if bytes(answer.source) == b"null" else bytes(answer.source)
    more = tuple(_given(one) for one in answer.more)
    return Answer(answer.content, answer.tool_calls, answer.finish_reason, more, source, answer.edited)


def replay(cached: CachedRun, run_id: str | None = None) -> RunRecord:
    """The record a hit is rendered from: the cached run's, under `run_id` (a hit's own id; None: a child run's
    original), saying which run it came from. Its times give the cached run's duration again."""
    stages = {
        name: StageRecord(s.target, s.usage, s.elapsed_ms, s.calls, s.attempts, s.answered, s.reported, s.cost)
        for name, s in cached.stages.items()
    }
    return RunRecord(
        run_id or cached.run_id,
        cached.served_model,
        cached.mode,
        started=1.0,  # any time but 0 for `ended`, which is falsy at 0
        stages=stages,
        intermediate=dict(cached.intermediate),
        answer=_given(cached.answer),
        status="ok",
        currency=cached.currency,
        ended=1.0 + cached.elapsed_ms / 1000,
        nested={stage: [replay(child) for child in children] for stage, children in cached.nested.items()},
        cached_from=None if run_id is None else cached.run_id,
    )


encoder = msgspec.json.Encoder()
decoder = msgspec.json.Decoder(CachedRun)
