"""Writing a batch of records: the rows it makes, and the statements that write them in one transaction.

A batch becomes runs to insert (a run opened and closed in the same batch — most runs — is inserted once, whole,
never updated), stages to insert and runs to finalise (opened in an earlier batch). A run's answer or intermediate
text that is the output of one of its stages in the same batch is kept once, in the stage's row (`from_stages`).
The statements are SQLAlchemy's, compiled once per dialect; each list is sent with the driver's `executemany`.

Two ways to send them: through SQLAlchemy's async connection (`write_async`: PostgreSQL through asyncpg, an
in-memory SQLite database), or, for a SQLite file, with the standard library's `sqlite3` in a worker thread
(`SqliteFile`). The second skips SQLAlchemy's and aiosqlite's per-statement work: writing a run took about
25 µs less CPU that way (in-process, batches of 150 direct runs into a file of 30,000). Reads, the schema and
upkeep stay with SQLAlchemy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import bindparam, update
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from .recorder import Record, RunClosed, RunOpened, StageDone
from .rows import CLOSED_COLUMNS, Cleaner, closed_row, opened_row, stage_row
from .schema import runs, stages


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement compiled for one dialect, and the names of its parameters in the order it takes them."""

    sql: str
    names: tuple[str, ...]
    positional: bool

    def params(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """`rows` as the driver's parameters (a missing value is NULL)."""
        names = self.names
        if self.positional:
            return [tuple([row.get(name) for name in names]) for row in rows]
        return [{name: row.get(name) for name in names} for row in rows]


@dataclass(frozen=True, slots=True)
class Statements:
    """The three statements of a batch, for one dialect."""

    insert_runs: Statement
    insert_stages: Statement
    close_runs: Statement


def statements(dialect: Dialect) -> Statements:
    closing = update(runs).where(runs.c.run_id == bindparam("b_run_id"))
    closing = closing.values({name: bindparam(name) for name in CLOSED_COLUMNS})
    return Statements(
        _compiled(runs.insert(), dialect), _compiled(stages.insert(), dialect), _compiled(closing, dialect)
    )


def _compiled(statement: Any, dialect: Dialect) -> Statement:
    compiled = statement.compile(dialect=dialect)
    if compiled.positional:
        return Statement(str(compiled), tuple(compiled.positiontup or ()), True)
    return Statement(str(compiled), tuple(compiled.params), False)


@dataclass(slots=True)
class BatchRows:
    opened: list[dict[str, Any]]  # runs to insert
    done: list[dict[str, Any]]  # stages to insert
    closed: list[dict[str, Any]]  # runs to finalise

    def parts(self, sql: Statements) -> list[tuple[str, list[Any]]]:
        """Each statement with the driver's parameters for its rows, in the order they must run."""
        parts = ((sql.insert_runs, self.opened), (sql.insert_stages, self.done), (sql.close_runs, self.closed))
        return [(statement.sql, statement.params(rows)) for statement, rows in parts if rows]


def batch_rows(batch: Sequence[Record], instance: str, clean: Cleaner) -> BatchRows:
    """A batch's rows (a run's records are in queue order, so its row exists before its stages and its end)."""
    opened = {r.run_id: opened_row(r, instance, clean.for_secret(r.secret)) for r in batch if type(r) is RunOpened}
    done = []
    outputs: dict[str, list[tuple[int, str]]] = {}  # per run, its stages' outputs in this batch
    for record in batch:
        if type(record) is StageDone:
            done.append(stage_row(record, clean.for_secret(record.secret)))
            output = record.finished.output
            if output and record.capture == "full":
                outputs.setdefault(record.run_id, []).append((record.index, output))
    closed = []
    for record in batch:
        if type(record) is RunClosed:
            row = closed_row(record, clean.for_secret(record.secret), outputs.get(record.run_id, ()))
            started = opened.get(record.run_id)
            if started is None:
                closed.append(row)
            else:  # opened and closed in one batch: the row is written once, whole
                del row["b_run_id"]
                started.update(row)
    return BatchRows(list(opened.values()), done, closed)


async def write_async(conn: AsyncConnection, rows: BatchRows, sql: Statements) -> None:
    """Write `rows` through SQLAlchemy's async connection, inside the caller's transaction."""
    for statement, params in rows.parts(sql):
        await conn.exec_driver_sql(statement, params)


PAGE_SIZE = 8192


def sqlite_settings(dbapi_connection: Any) -> None:
    """The store's settings for every SQLite connection, SQLAlchemy's and `SqliteFile`'s: WAL (readers — the runs
    API, another worker — never wait for the writer), `synchronous=NORMAL`, and a busy file waited for, not failed.
    The driver's own transaction handling is off: the store says when and how a transaction starts.

    A new file gets 8 KiB pages (a file that exists keeps its own): a run's row of a few KB leaves most of a 4 KiB
    page unused, and every page is written twice (to the WAL, then at checkpoint). With 8 KiB pages a direct run
    of the benchmark's shape takes 3.5 KB of file, not 4.9, and writing it about a quarter less CPU."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL: a WAL file's page size is fixed
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class SqliteFile:
    """Batches written to a SQLite file by the standard library's `sqlite3`, one worker thread at a time, on a
    connection of its own (opened at the first batch) with the store's settings (`sqlite_settings`), the write lock
    taken when the transaction begins."""

    def __init__(self, path: str, sql: Statements) -> None:
        self.path, self.sql = path, sql
        self._conn: sqlite3.Connection | None = None
        self._one = anyio.CapacityLimiter(1)

    async def write(self, rows: BatchRows) -> None:
        await anyio.to_thread.run_sync(self._write, rows.parts(self.sql), limiter=self._one)

    def _write(self, params: list[tuple[str, list[Any]]]) -> None:
        conn = self._conn or self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, values in params:
                conn.executemany(sql, values)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        sqlite_settings(conn)
        self._conn = conn
        return conn

    async def aclose(self) -> None:
        """Close the connection, after the batch being written (if any)."""
        async with self._one:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
