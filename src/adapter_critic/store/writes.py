"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Writing a batch of records: the rows it makes, and the statements that write them in one transaction.

A batch becomes runs to insert (a run opened and closed in the same batch — most runs — is inserted once, whole,
never updated, its stages in it), stages to insert (of runs that go on past the batch) and runs to finalise
(opened in an earlier batch). The statements are SQLAlchemy's, compiled once per dialect, with their parameters
in the order the rows' tuples are made; each list is sent with the driver's `executemany`.

Two ways to send them: through SQLAlchemy's async connection (`write_async`: PostgreSQL through asyncpg, an
in-memory SQLite database), or, for a SQLite file, with the standard library's `sqlite3` on a thread of its own
(`sqlitefile.SqliteFile`). The second skips SQLAlchemy's and aiosqlite's per-statement work: writing a run took
about 25 µs less CPU that way (in-process, batches of 150 direct runs into a file of 30,000). Reads, the schema and
upkeep stay with SQLAlchemy.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import bindparam, insert, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from .cleaning import Cleaner
from .recorder import CachePut, FeedbackGiven, Record, RunClosed, RunOpened, StageDone
from .rows import (
    CACHE_COLUMNS,
    CLOSED_COLUMNS,
    FEEDBACK_COLUMNS,
    OPEN_COLUMNS,
    RUNNING,
    STAGE_COLUMNS,
    Row,
    cache_row,
    closed_values,
    feedback_row,
    opened_row,
    stage_row,
)
from .schema import cache, feedback, runs, stages


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement compiled for one dialect; its rows are tuples in `order`, which `params` gives the driver as it
    takes them (positionally in the statement's own order, or by name)."""

    sql: str
    order: tuple[str, ...]
    positional: bool
    take: Callable[[Row], Row] | None = None  # a row in the statement's order, when that is not `order`

    def params(self, rows: Sequence[Row]) -> list[Any]:
        if not self.positional:
            order = self.order
            return [dict(zip(order, row, strict=True)) for row in rows]
        take = self.take
        return list(rows) if take is None else [take(row) for row in rows]


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements of a batch, for one dialect."""

    insert_runs: Statement
    insert_stages: Statement
    close_runs: Statement
    put_cache: Statement  # an answer of the exact-match cache: inserted, or replacing the key's expired one
    insert_feedback: Statement  # feedback entries on runs


def statements(dialect: Dialect) -> Statements:
    columns = OPEN_COLUMNS + CLOSED_COLUMNS
    closing = update(runs).where(runs.c.run_id == bindparam("b_run_id"))
    closing = closing.values({name: bindparam(name) for name in CLOSED_COLUMNS})
    upsert = (postgresql.insert if dialect.name == "postgresql" else sqlite.insert)(cache)
    upsert = upsert.values({name: bindparam(name) for name in CACHE_COLUMNS})
    upsert = upsert.on_conflict_do_update(
        index_elements=[cache.c.key], set_={name: upsert.excluded[name] for name in CACHE_COLUMNS if name != "key"}
    )
    return Statements(
        _compiled(insert(runs).values({name: bindparam(name) for name in columns}), dialect, columns),
        _compiled(insert(stages).values({name: bindparam(name) for name in STAGE_COLUMNS}), dialect, STAGE_COLUMNS),
        _compiled(closing, dialect, (*CLOSED_COLUMNS, "b_run_id")),
        _compiled(upsert, dialect, CACHE_COLUMNS),
        _compiled(
            insert(feedback).values({name: bindparam(name) for name in FEEDBACK_COLUMNS}), dialect, FEEDBACK_COLUMNS
        ),
    )


def _compiled(statement: Any, dialect: Dialect, order: tuple[str, ...]) -> Statement:
    """`statement` compiled, for rows made in `order`."""
    compiled = statement.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ()) if compiled.positional else tuple(compiled.params)
    if sorted(names) != sorted(order):
        raise RuntimeError(f"store statement takes {names}, not {order}: {compiled}")
    take = None
    if compiled.positional and names != order:
        take = cast(Callable[[Row], Row], operator.itemgetter(*(order.index(name) for name in names)))
    return Statement(str(compiled), order, compiled.positional, take)


@dataclass(slots=True)
class BatchRows:
    opened: list[Row]  # runs to insert: whole when they end in the batch, else as they start
    done: list[Row]  # stages to insert: of runs that do not end in the batch
    closed: list[Row]  # runs to finalise (opened in an earlier batch): `CLOSED_COLUMNS` and the run id
    cached: list[Row]  # answers of the exact-match cache (`CACHE_COLUMNS`)
    given: list[Row] = field(default_factory=list)  # feedback entries (`FEEDBACK_COLUMNS`), after the runs they are on

    def parts(self, sql: Statements) -> list[tuple[str, list[Any]]]:
        """Each statement with the driver's parameters for its rows, in the order they must run."""
        parts = (
            (sql.insert_runs, self.opened),
            (sql.insert_stages, self.done),
            (sql.close_runs, self.closed),
            (sql.put_cache, self.cached),
            (sql.insert_feedback, self.given),
        )
        return [(statement.sql, statement.params(rows)) for statement, rows in parts if rows]


# How long rows are made between two returns to the event loop (`building`) while the store keeps up. A request in
# flight waits for a slice at each point it awaits, and on a busy loop a slice is all the writer gets in one of the
# loop's turns: slices of a fixed 8 records (some 30 µs) kept a saturated server's writer from keeping up, and its
# queue overflowed. So a slice grows with the queue's backlog (`slice_seconds`), and from `URGENT_BACKLOG` on a
# SQLite file's batch is written at the server's own priority (`sqlitefile.SqliteFile.write`).
SLICE_SECONDS = 0.00003
BACKLOG_SLICES = 60  # a full queue's slices are this many times longer, plus one
URGENT_BACKLOG = 0.25
# A batch of more records than this is written at the server's priority too: one that waits long on the lowest
# priority, under sustained load, lets the queue overflow before the backlog shows it.
LOW_PRIORITY_RECORDS = 500


def urgent(records: int, backlog: float) -> bool:
    """Whether a batch of `records`, with the queue `backlog` full behind it, is written at the server's priority."""
    return records > LOW_PRIORITY_RECORDS or backlog >= URGENT_BACKLOG


def slice_seconds(backlog: float) -> float:
    """How long a slice of rows is with the store's queue `backlog` full (0 to 1)."""
    return SLICE_SECONDS * (1 + BACKLOG_SLICES * min(max(backlog, 0.0), 1.0))


def batch_rows(batch: Sequence[Record], instance: str, clean: Cleaner) -> BatchRows:
    """A batch's rows, made at once (`building` makes them in slices)."""
    steps = building(batch, instance, clean)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(BatchRows, done.value)


def building(
    batch: Sequence[Record], instance: str, clean: Cleaner, seconds: float = SLICE_SECONDS
) -> Generator[None, None, BatchRows]:
    """A batch's rows, made `seconds` at a time: the generator pauses between slices, so a caller on the event
    loop can let requests run in between (a batch of a loaded server is hundreds of runs, milliseconds of work).

    A run's records are in queue order (its start, its stages, its end): a run that ends in the batch keeps the
    stages recorded in the batch in its end's document (`rows.closed_values`); the stages of the others are rows of
    `stages`."""
    clock = time.perf_counter
    ending = {record.run_id for record in batch if type(record) is RunClosed}
    opened: dict[str, Row] = {}
    kept: dict[str, list[StageDone]] = {}  # per run that ends in the batch, its stages in the batch
    done = []
    until = clock() + seconds
    for record in batch:
        if type(record) is RunOpened:
            opened[record.run_id] = opened_row(record, instance, clean.for_secret(record.secret))
        elif type(record) is StageDone:
            if record.run_id in ending:
                kept.setdefault(record.run_id, []).append(record)
            else:
                done.append(stage_row(record, clean.for_secret(record.secret)))
        if clock() >= until:
            yield
            until = clock() + seconds
    ended: dict[str, Row] = {}
    closed = []
    cached = []
    given = []
    for record in batch:
        if type(record) is CachePut:
            cached.append(cache_row(record, clean.for_secret(record.secret)))
        elif type(record) is FeedbackGiven:
            given.append(feedback_row(record, clean.for_secret(record.secret)))
        elif type(record) is RunClosed:
            values = closed_values(record, kept.get(record.run_id, ()), clean.for_secret(record.secret))
            if record.run_id in opened:
                ended[record.run_id] = values  # opened and closed in one batch: the row is written once, whole
            else:
                closed.append((*values, record.run_id))
            if clock() >= until:
                yield
                until = clock() + seconds
    inserted = [row + ended.get(run_id, RUNNING) for run_id, row in opened.items()]
    return BatchRows(inserted, done, closed, cached, given)


async def write_async(conn: AsyncConnection, rows: BatchRows, sql: Statements) -> None:
    """Write `rows` through SQLAlchemy's async connection, inside the caller's transaction."""
    for statement, params in rows.parts(sql):
        await conn.exec_driver_sql(statement, params)
