"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`RunRecorder`: a run-event subscriber (one per run) that turns a run's events into store records.

It runs on the request's task for every event, so it only notes times and hands plain objects to the store's
queue (`enqueue`, which never blocks); encoding, capture and redaction happen later, in the store's background
writer (`store.rows`). Three records per run and one per stage: `RunOpened` when the run starts, `StageDone` as
each stage call ends, `RunClosed` when the run ends. The exact-match cache adds a `CachePut` after a run it keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import Answer, ChatRequest, Usage
from ..errors import APIError
from ..events import Cost, Event, RunFinished, RunStarted, StageFinished, StageStarted
from .records import Capture, StoredError


@dataclass(slots=True)
class RunOpened:
    run_id: str
    request_id: str
    served_model: str
    mode: str
    stream: bool
    started_at: float
    capture: Capture
    request: ChatRequest
    secret: str | None = None  # a forwarded caller's token: redacted like a configured key
    key_name: str | None = None  # the named inbound key that started it (`[[auth.keys]]`)
    parent_run_id: str | None = None  # a child run (a stage run by another served model): its parent and that stage
    parent_stage: str | None = None
    cached_from: str | None = None  # a cache hit: the run whose answer it gave again


@dataclass(slots=True)
class StageDone:
    run_id: str
    index: int
    finished: StageFinished
    started_offset_ms: float
    messages: Any  # None when the stage sent the client's own messages (`request_messages`): they are stored once
    capture: Capture
    secret: str | None = None
    request_messages: bool = False


@dataclass(slots=True)
class RunClosed:
    run_id: str
    status: str
    finished_at: float
    duration_ms: float
    usage: Usage
    error: APIError | StoredError | None  # a writer process gets the error as the client got it (`wire`)
    intermediate: dict[str, Any]
    answer: Answer
    capture: Capture
    secret: str | None = None
    cost: Cost | None = None  # None: the server has no prices


@dataclass(slots=True)
class CachePut:
    """An answer for the exact-match cache (`cache.backends.StoreBackend`), written with the run that made it."""

    key: str
    run_id: str
    served_model: str
    entry: Any  # `cache.entry.CachedRun`, encoded (and its secrets masked) by the writer
    created_at: float
    expires_at: float
    secret: str | None = None


@dataclass(slots=True)
class FeedbackGiven:
    """A feedback entry on a run (`store.feedback`), written by the store's writer like a run's records."""

    feedback_id: str
    run_id: str
    created_at: float
    score: float
    via: str = "api"
    key_name: str | None = None
    label: str | None = None
    comment: str | None = None
    stage: str | None = None
    stage_index: int | None = None
    verdict: str | None = None
    corrected_answer: str | None = None
    secret: str | None = None


Record = RunOpened | StageDone | RunClosed | CachePut | FeedbackGiven


@dataclass(slots=True)
class RunRecorder:
    """Records one run: call it with each of the run's events (it is an `events.Subscriber`)."""

    enqueue: Callable[[Record], None]
    request_id: str
    request: ChatRequest
    capture: Capture = "full"
    secret: str | None = None
    key_name: str | None = None
    _run_id: str = ""
    _began: float = 0.0
    _index: int = 0
    # Per stage name: when its call started (perf_counter) and the messages it sent.
    _open: dict[str, tuple[float, Any]] = field(default_factory=dict)

    def __call__(self, event: Event) -> None:
        kind = type(event)
        if kind is StageStarted:
            assert isinstance(event, StageStarted)
            self._open[event.stage] = (time.perf_counter(), event.messages)
        elif kind is StageFinished:
            assert isinstance(event, StageFinished)
            began, messages = self._open.pop(event.stage, (time.perf_counter() - event.elapsed_ms / 1000, None))
            offset = round((began - self._began) * 1000, 3)
            own = messages is self.request.messages_json  # a first stage sends the request's messages object itself
            done = StageDone(
                self._run_id, self._index, event, offset, None if own else messages, self.capture, self.secret, own
            )
            self._index += 1
            self.enqueue(done)
        elif kind is RunStarted:
            assert isinstance(event, RunStarted)
            self._run_id = event.run_id
            self._began = time.perf_counter()
            self.enqueue(
                RunOpened(
                    event.run_id,
                    self.request_id,
                    event.served_model,
                    event.mode,
                    event.stream,
                    time.time(),
                    self.capture,
                    self.request,
                    self.secret,
                    self.key_name,
                    event.parent,
                    event.parent_stage,
                    event.cached_from,
                )
            )
        elif kind is RunFinished:
            assert isinstance(event, RunFinished)
            record = event.record
            self.enqueue(
                RunClosed(
                    self._run_id,
                    event.status,
                    time.time(),
                    round((time.perf_counter() - self._began) * 1000, 3),
                    record.total_usage(),
                    event.error,
                    dict(record.intermediate),
                    record.answer,
                    self.capture,
                    self.secret,
                    record.cost(),
                )
            )
