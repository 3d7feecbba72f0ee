"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A SQLite file's batches, written by the standard library's `sqlite3` on a thread of the store's own
(`SqliteFile`), and the settings every SQLite connection of the store gets (`sqlite_settings`).

The writer thread runs at the lowest priority (`WRITER_NICE`, on Linux, where a nice value is a thread's own).
SQLite's work on it does not hold the GIL, so it competes with the event loop for the CPU, not for the interpreter:
on a core the server keeps busy, the scheduler gave it whole time slices while requests waited. At the lowest
priority the loop takes the core back whenever it has work and the writer takes what is left (or another core,
where there is one): `python -m benchmarks.tail` measured the store's added p99 at concurrency 1 at +0.22 ms, against
+0.64 at nice 10 and +1.44 at the server's priority in the same run. What is left may be next to nothing on a
saturated core, so a big batch, or one written while the store's queue backs up (`writes.urgent`), goes to a
second thread at the server's own priority (`write(urgent=True)`): `python -m benchmarks.keeps_up` drops no record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sqlite3
import sys
from typing import Any

import anyio

from .writes import BatchRows, Statements

PAGE_SIZE = 8192
WRITER_NICE = 19  # how much lower the writer thread's priority is than the server's (Linux): the lowest
_CACHED = "SELECT entry FROM cache WHERE key = ? AND expires_at > ?"


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


def lower_priority(nice: int = WRITER_NICE) -> None:
    """The calling thread's nice value raised by `nice` (Linux only: elsewhere `nice` is the whole process's). A
    thread may always lower its own priority; it could not raise it back, and never needs to."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.nice(nice)


class SqliteFile:
    """Batches written to a SQLite file by the standard library's `sqlite3`, one at a time, on a thread of its own
    (`lower_priority`) and a connection of its own (opened at the first batch) with the store's settings
    (`sqlite_settings`), the write lock taken when the transaction begins."""

    def __init__(self, path: str, sql: Statements) -> None:
        self.path, self.sql = path, sql
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None  # the cache's lookups (`cached`)
        self._one = anyio.Lock()
        self._thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="adapter-critic-store-writer", initializer=lower_priority
        )
        self._urgent = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="adapter-critic-store-catch-up")

    async def write(self, rows: BatchRows, *, urgent: bool = False) -> None:
        """Write `rows` in one transaction; once begun, a batch is written (or fails) even if the caller is
        cancelled, and the next waits for it. `urgent`: the store's queue is backing up, so the batch is written on
        a thread at the server's own priority, which a saturated core does not starve (at the lower one, a store
        under sustained load fell behind and dropped records)."""
        params = rows.parts(self.sql)
        async with self._one:
            thread = self._urgent if urgent else self._thread
            written = asyncio.wrap_future(thread.submit(self._write, params))
            with anyio.CancelScope(shield=True):  # as `anyio.to_thread.run_sync` waits for a thread it started
                await written

    def write_here(self, rows: BatchRows) -> None:
        """Write `rows` in one transaction on the caller's thread (the store's writer process has nothing else to
        do meanwhile)."""
        self._write(rows.parts(self.sql))

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

    def cached(self, key: str, now: float) -> str | None:
        """The exact-match cache's entry under `key`, unexpired: one read by the primary key, on the caller's thread
        (the event loop), on a connection of its own. In WAL mode a reader never waits for the writer, and the read
        takes microseconds: a hop to a worker thread, or SQLAlchemy's async engine, cost several times more (the
        cache's benchmark, `benchmarks/cache.py`)."""
        reader = self._reader
        if reader is None:
            reader = self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            sqlite_settings(reader)
        row = reader.execute(_CACHED, (key, now)).fetchone()
        return None if row is None else str(row[0])

    async def aclose(self) -> None:
        """Close the connections, after the batch being written (if any), and let the writer thread go."""
        async with self._one:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._thread.shutdown(wait=False)
            self._urgent.shutdown(wait=False)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
