"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`RunStore`: a store to read runs from and, in a server, to record them to — off the hot path.

Recording: `enqueue` (called by each run's `RunRecorder` on the request's task) appends a record to a bounded
in-memory queue and never blocks or fails. A background task lets records gather (`GATHER_SECONDS`, unless
`batch_size` are queued or a flush is waited for), then writes them in one transaction; what is queued meanwhile
gathers for the next batch. With `writer="process"` (a server's store, `settings.StoreConfig.writer`) a started
store's batches are written by a writer process (`writerprocess`): each record is encoded as it is queued, a batch
is one frame down its pipe (`outbox`), and the rows are made and written there, off this interpreter; an in-memory
SQLite store, one not started (opened to read: `open_store`) and `writer="inline"` make the rows on the event loop
in slices and write them here (`Database.write`).

When the queue is full a record is dropped — and so are the later records of a run whose start was dropped —
counted in `dropped` and logged at most once a minute. `aclose` drains the queue before closing (what the writer
process has, through it; the rest here), and the writer process then exits. Another task beats for this process in
the `instances` table every `heartbeat_seconds`, marks runs of processes that are gone `interrupted` (at start-up
too: see `Database.mark_interrupted`) and prunes by age and count (`max_age_days`, `max_runs`).

Readers (`list_runs`, `get_run`, `follow`) need no task: `open_store(url)` is enough.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal

import msgspec

from .cleaning import Cleaner
from .database import HEARTBEAT_SECONDS, Database, reason
from .feedback import FeedbackNotKept
from .outbox import Outbox
from .recorder import FeedbackGiven, Record, RunClosed, RunOpened
from .records import EVERY_RUN, Feedback, RunDetail, RunPage, RunQuery, RunsOf, RunSummary, StoredStage
from .writerprocess import WriterDied, WriterProcess
from .writes import URGENT_BACKLOG, urgent

logger = logging.getLogger("adapter_critic")

DROP_LOG_SECONDS = 60.0
GATHER_SECONDS = 0.1  # how long the writer lets records gather before a batch (unless a flush is waited for)
FOLLOW_POLL_SECONDS = 1.0  # how often `follow` looks for stages written by another process

FollowEvent = tuple[Literal["run", "stage", "end"], RunSummary | StoredStage]
Writer = Literal["process", "inline"]


class RunStore:
    """A run store (see the package docstring). Open one with `open_store`."""

    def __init__(
        self,
        database: Database,
        *,
        queue_size: int = 10_000,
        batch_size: int = 2_000,
        max_age_days: float | None = None,
        max_runs: int | None = None,
        prune_interval_seconds: float = 300.0,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        secrets: Callable[[], Sequence[str]] = list,
        writer: Writer = "inline",
    ) -> None:
        self.database = database
        self.queue_size, self.batch_size = queue_size, batch_size
        self.max_age_days, self.max_runs = max_age_days, max_runs
        self.prune_interval_seconds = prune_interval_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.secrets = secrets  # every form of every secret, read for each batch (keys may rotate)
        self.instance = uuid.uuid4().hex
        self.required = True  # a server stops its start-up when this store cannot be opened (else goes on without)
        self.dropped = 0  # records dropped because the queue was full (a metric reads it)
        self.failed = 0  # records lost because writing their batch failed
        self._queue: collections.deque[Record] = collections.deque()
        # `writer="process"`: where the batches are written once the store has started (None: in this process).
        self.writer: Writer = writer
        self._outbox = Outbox()  # what goes to the writer process
        self._closing = False  # `aclose` drains the queue: in this process, at its own priority
        self._lost_runs: set[str] = set()  # runs whose start was dropped: their later records are dropped too
        self._enqueued = 0
        self._handled = 0
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()  # someone waits for the queue to be written: write without gathering
        self._written = asyncio.Event()  # set (and replaced) after each batch
        self._tasks: list[asyncio.Task[None]] = []
        self._dropped_logged = 0
        self._drop_logged_at = -DROP_LOG_SECONDS
        # Told of each batch once it is written (or failed): the exact-match cache forgets the answers it held
        # until their rows were there (`cache.backends.StoreBackend`).
        self.on_written: Callable[[Sequence[Record]], None] | None = None

    @property
    def process(self) -> WriterProcess | None:
        """The writer process the batches go to (None: they are written in this process)."""
        return self._outbox.process

    @property
    def queue_depth(self) -> int:
        """Records waiting to be written (a metric reads it)."""
        return len(self._queue)

    def where(self) -> str:
        return self.database.where()

    async def __aenter__(self) -> RunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- reading ---------------------------------------------------------------------------------------------------
    async def list_runs(
        self,
        query: RunQuery | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        seen_by: RunsOf = EVERY_RUN,
    ) -> RunPage:
        """Runs newest first, `limit` at a time; `cursor` is a page's `next_cursor` (BadCursor when it is not).
        `seen_by`: whose runs (default: every run)."""
        return await self.database.list_runs(query or RunQuery(), limit, cursor, seen_by)

    async def key_usage(self, key_name: str, since: float) -> tuple[int, int, float | None]:
        """How many runs the named key started since `since` (Unix seconds), their tokens and known cost."""
        return await self.database.key_usage(key_name, since)

    async def get_run(self, run_id: str, *, seen_by: RunsOf = EVERY_RUN) -> RunDetail | None:
        """The whole record of a run, its stages in order; None when there is no such run (that `seen_by` sees)."""
        return await self.database.get_run(run_id, seen_by)

    async def follow(self, run_id: str, *, seen_by: RunsOf = EVERY_RUN) -> AsyncIterator[FollowEvent]:
        """The run (`"run"`), each of its finished stages in order (`"stage"`) — the ones to come too, while it
        is running — and the run as it ended (`"end"`). Nothing at all when there is no such run (that `seen_by`
        sees)."""
        run = await self.database.get_summary(run_id, seen_by)
        if run is None:
            return
        yield "run", run
        index = 0
        while True:
            written = self._written
            for stage in await self.database.stages_from(run_id, index, seen_by):
                index = stage.index + 1
                yield "stage", stage
            if run.status != "running":
                yield "end", run
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(written.wait(), FOLLOW_POLL_SECONDS)
            run = await self.database.get_summary(run_id, seen_by) or run

    async def give_feedback(self, record: FeedbackGiven) -> Feedback:
        """Write a feedback entry (`store.feedback.given` makes it) through the writer, at once, and return it as
        stored; `FeedbackNotKept` when it could not be written (the queue full, the database down)."""
        self.enqueue(record)
        await self.flush()
        for kept in await self.database.feedback_of(record.run_id):
            if kept.id == record.feedback_id:
                return kept
        raise FeedbackNotKept(
            "The feedback could not be written to the run store (its write queue is full or the database failed: "
            "see the server log); try again."
        )

    # -- recording -------------------------------------------------------------------------------------------------
    def enqueue(self, record: Record) -> None:
        """Queue a record for writing; drops it (counted) when the queue is full. Never blocks, never raises."""
        kind = type(record)
        if self._lost_runs and record.run_id in self._lost_runs:
            if kind is RunClosed:
                self._lost_runs.discard(record.run_id)
            self._drop()
            return
        if len(self._queue) >= self.queue_size:
            if kind is RunOpened:
                self._lost_runs.add(record.run_id)
            self._drop()
            return
        if self.process is not None:
            try:
                self._outbox.add(record, len(self._queue) < self.batch_size)
            except (TypeError, ValueError, msgspec.EncodeError) as exc:  # a value msgpack cannot hold: the record
                self.failed += 1
                logger.warning("run store: a %s record could not be sent to the writer: %s", kind.__name__, exc)
                return
        self._queue.append(record)
        self._enqueued += 1
        if not self._wake.is_set():
            self._wake.set()

    def _drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._drop_logged_at >= DROP_LOG_SECONDS:
            self._drop_logged_at = now
            logger.warning(
                "run store queue full (%d records): %d record(s) dropped since the last warning, %d in all; "
                "requests are not affected. A slow database, or raise store.queue_size",
                self.queue_size,
                self.dropped - self._dropped_logged,
                self.dropped,
            )
            self._dropped_logged = self.dropped

    async def start(self) -> None:
        """Start recording: upgrade the schema, register this process, mark runs of dead ones `interrupted`, prune,
        and start the writer and the upkeep task."""
        await self.database.upgrade()
        await self.database.register(self.instance)
        await self.mark_interrupted()
        await self.prune()
        if self.writer == "process" and self.database.shareable:
            self._outbox.open(self.database.url.render_as_string(hide_password=False), self._queue)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._writer()), loop.create_task(self._upkeep())]

    async def flush(self) -> None:
        """Wait until every record queued so far is written (or its batch failed)."""
        target = self._enqueued
        self._urgent.set()
        if not self._tasks:
            while self._handled < target:
                await self._write_batch()
            return
        while self._handled < target:
            await self._written.wait()

    async def mark_interrupted(self) -> int:
        """Mark the runs of servers that are gone `interrupted` now (start-up and every beat do); returns how many."""
        interrupted = await self.database.mark_interrupted(self.heartbeat_seconds)
        if interrupted:
            logger.warning("run store: %d run(s) left running by a stopped server marked interrupted", interrupted)
        return interrupted

    async def prune(self) -> int:
        """Apply retention now, and delete the cache's expired answers; returns how many runs were deleted."""
        await self.database.expire_cache(time.time())
        if self.max_age_days is None and self.max_runs is None:
            return 0
        removed = await self.database.prune(self.max_age_days, self.max_runs)
        if removed:
            logger.info("run store: pruned %d run(s) (store.max_age_days / store.max_runs)", removed)
        return removed

    async def aclose(self) -> None:
        """Drain the queue, stop the tasks, leave the `instances` table, close the database.

        The batch the writer process has is waited for; what is still queued is written here, on a thread at the
        server's own priority (`SqliteFile.write`'s `urgent`): a writer at the lowest priority on a machine kept busy
        by other processes took seconds to start and write, and held the shutdown meanwhile."""
        try:
            if self._tasks:
                self._closing = True
                await self.flush()
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                self._tasks = []
                await self._outbox.aclose()
                await self.database.unregister(self.instance)
        finally:
            await self.database.aclose()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            if len(self._queue) < self.batch_size:
                # Let a batch gather: one transaction for many runs costs far less than one per record.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), GATHER_SECONDS)
            self._wake.clear()
            await self._write_batch()
            # What was queued while the batch was written gathers for a batch of its own, unless it is a batch
            # already or someone waits for it: written at once, it would be a small batch, each costing a commit.
            if self._queue:
                self._wake.set()
            else:
                self._urgent.clear()

    async def _write_batch(self) -> None:
        take = min(self.batch_size, len(self._queue))
        batch = [self._queue.popleft() for _ in range(take)]
        try:
            if batch:
                backlog = 1.0 if self._closing else len(self._queue) / self.queue_size  # what waits behind it
                if self.process is not None:
                    if self._closing:
                        self._outbox.take(take)  # written here
                    elif await self._outbox.send(
                        take, self.instance, self.secrets(), urgent(len(batch), backlog), backlog >= URGENT_BACKLOG
                    ):
                        return
                await self.database.write(batch, self.instance, Cleaner(self.secrets()), backlog=backlog)
        except WriterDied:  # logged by `WriterProcess`
            self.failed += len(batch)
        except Exception as exc:  # the database is down or full: the records are lost, the server goes on
            self.failed += len(batch)
            logger.warning("run store: writing %d record(s) failed: %s", len(batch), reason(exc))
        finally:
            self._handled += len(batch)
            if self.on_written is not None and batch:
                self.on_written(batch)
            written, self._written = self._written, asyncio.Event()
            written.set()

    async def _upkeep(self) -> None:
        last_prune = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                await self.database.heartbeat(self.instance)
                await self.mark_interrupted()
                if time.monotonic() - last_prune >= self.prune_interval_seconds:
                    last_prune = time.monotonic()
                    await self.prune()
            except Exception as exc:
                logger.warning("run store upkeep failed: %s", reason(exc))


async def open_store(url: str) -> RunStore:
    """A store at `url` (`sqlite:///…`, `postgresql://…`) to read, its schema upgraded; see the package docstring."""
    store = RunStore(Database(url))
    try:
        await store.database.upgrade()
    except BaseException:
        await store.database.aclose()
        raise
    return store
