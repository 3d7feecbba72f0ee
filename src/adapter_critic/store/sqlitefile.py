"""`SqliteFile`: a SQLite file's batches written with the standard library's `sqlite3` — on the event loop's own
thread while that can neither wait nor sync, on a worker thread when it could; and the settings of every SQLite
connection of the store (`sqlite_settings`).

Handing a batch to a worker thread costs the server more CPU than the writing itself saves the loop: the driver
lets go of the GIL at every row, and on a busy server each hand-over is a thread switch. Written on the loop's
thread, the same batches cost a direct request about a sixth less of the store's part (`python -m benchmarks.store
--parts`, see benchmarks/README.md). The loop is kept from waiting:

- Its connection never waits for a lock (busy timeout 0): when another process holds the write lock, the batch
  goes to the worker thread, whose connection waits for it.
- It never syncs to disk: its connection does not checkpoint (`wal_autocheckpoint=0`). A worker thread checkpoints
  (`PASSIVE`, fsync included) after every `CHECKPOINT_ROWS` rows, beside the writing.
- A batch is one transaction, its rows sent `CHUNK_ROWS` at a time, the loop free in between.
- When a chunk takes longer than `SLOW_SECONDS` (a disk so slow that writing to the page cache waits), batches go
  to the worker thread for the next `SLOW_BACKOFF_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from typing import Any

import anyio
import anyio.to_thread

PAGE_SIZE = 8192
BUSY_WAIT_MS = 10_000  # how long a connection that may wait (not the loop's) waits for another's write lock
CHUNK_ROWS = 64
CHECKPOINT_ROWS = 2_000  # about the SQLite default of 1,000 pages, at a direct run's 3.5 KB of file
SLOW_SECONDS = 0.05
SLOW_BACKOFF_SECONDS = 60.0

Params = list[tuple[str, list[Any]]]  # each statement with its rows, in the order they run


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
    cursor.execute(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # the extended codes of BUSY too


def _write(conn: sqlite3.Connection, params: Params) -> None:
    """`params` in one transaction, all at once (on a worker thread)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, values in params:
            conn.executemany(sql, values)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteFile:
    """A SQLite file's batches (see the module docstring): two connections, opened at the first batch — the loop's
    and the worker thread's, which also checkpoints — and at most one worker thread at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.on_loop = 0  # batches written on the loop's thread
        self.on_thread = 0  # batches written on a worker thread: the file was locked, or the disk slow
        self.checkpoints = 0
        self._loop_conn: sqlite3.Connection | None = None
        self._thread_conn: sqlite3.Connection | None = None
        self._one = anyio.CapacityLimiter(1)  # the worker thread's connection: one user at a time
        self._unchecked = 0  # rows written by the loop's connection since the last checkpoint began
        self._checkpointing: asyncio.Task[None] | None = None
        self._thread_until = 0.0  # monotonic time until which batches go to the worker thread (a slow disk)

    async def write(self, params: Params) -> None:
        """Write `params` in one transaction (see the module docstring for where)."""
        if time.monotonic() >= self._thread_until and await self._write_on_loop(params):
            self.on_loop += 1
            self._unchecked += sum(len(values) for _, values in params)
            if self._unchecked >= CHECKPOINT_ROWS and self._checkpointing is None:
                self._unchecked = 0
                self._checkpointing = asyncio.get_running_loop().create_task(self._checkpoint())
            return
        self.on_thread += 1
        await anyio.to_thread.run_sync(self._write_on_thread, params, limiter=self._one)

    async def _write_on_loop(self, params: Params) -> bool:
        """Write `params` here, a chunk of rows at a time; False (nothing written) when the file is locked."""
        conn = self._loop_conn or self._open_loop_conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return False
            raise
        cancelled: asyncio.CancelledError | None = None
        try:
            for sql, values in params:
                for start in range(0, len(values), CHUNK_ROWS):
                    began = time.monotonic()
                    conn.executemany(sql, values[start : start + CHUNK_ROWS] if len(values) > CHUNK_ROWS else values)
                    if time.monotonic() - began > SLOW_SECONDS:
                        self._thread_until = time.monotonic() + SLOW_BACKOFF_SECONDS
                    if cancelled is None:
                        try:
                            await asyncio.sleep(0)
                        except asyncio.CancelledError as exc:  # finish the batch (nothing is lost), then stop
                            cancelled = exc
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if cancelled is not None:
            raise cancelled
        return True

    def _open_loop_conn(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA busy_timeout=0")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        self._loop_conn = conn
        return conn

    def _write_on_thread(self, params: Params) -> None:
        _write(self._thread_conn or self._open_thread_conn(), params)

    def _open_thread_conn(self) -> sqlite3.Connection:
        self._thread_conn = self._connect()
        return self._thread_conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        sqlite_settings(conn)
        return conn

    async def _checkpoint(self) -> None:
        try:
            await anyio.to_thread.run_sync(self._checkpoint_on_thread, limiter=self._one)
        except sqlite3.Error:
            pass  # the next one will do: a checkpoint only folds the WAL back into the file
        finally:
            self._checkpointing = None

    def _checkpoint_on_thread(self) -> None:
        (self._thread_conn or self._open_thread_conn()).execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.checkpoints += 1

    async def aclose(self) -> None:
        """Close the connections, after the checkpoint under way (if any)."""
        if self._checkpointing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._checkpointing)
        async with self._one:
            for conn in (self._loop_conn, self._thread_conn):
                if conn is not None:
                    conn.close()
            self._loop_conn = self._thread_conn = None
