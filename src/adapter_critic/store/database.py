"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Database`: the store's tables behind SQLAlchemy Core's async engine — SQLite through aiosqlite (embedded, no
server) or PostgreSQL through asyncpg (several workers and instances sharing one store). Every statement is written
once, for both.

It owns the SQL: the reads of the runs API, the instances table (which process runs what, so runs of a process
that is gone — `processes` tells — become `interrupted`), retention, and writing a batch of records in one
transaction — whose rows and statements are `writes`'s, sent with the standard library's `sqlite3` for a SQLite
file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
from sqlalchemy import delete, event, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..errors import StoreError
from .cleaning import Cleaner
from .processes import process_gone, process_identity
from .querying import RunReads
from .recorder import Record
from .schema import cache, feedback, instances, runs, stages, upgrade
from .sqlitefile import SqliteFile, sqlite_settings
from .transactions import writing
from .writes import BatchRows, building, slice_seconds, statements, urgent, write_async

# Each instance beats every `HEARTBEAT_SECONDS` (`store.heartbeat_seconds`); one silent for `STALE_BEATS` beats is
# gone, wherever it ran.
HEARTBEAT_SECONDS = 30.0
STALE_BEATS = 4


def reason(exc: BaseException) -> str:
    """An exception in one line for the log (a database error's first line: its SQL and parameters stay out)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class StoreURLError(StoreError, ValueError):
    """A `store.url` this store cannot open (the message says which forms it takes)."""


def engine_url(url: str) -> str:
    """`url` with the async driver this store uses (`sqlite+aiosqlite`, `postgresql+asyncpg`)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreURLError(
            f"store.url {url!r} is not a URL; use sqlite:///path/to/runs.db, postgresql://user@host/db or none"
        )
    driver = {
        "sqlite": "sqlite+aiosqlite",
        "sqlite+aiosqlite": "sqlite+aiosqlite",
        "postgresql": "postgresql+asyncpg",
        "postgres": "postgresql+asyncpg",
        "postgresql+asyncpg": "postgresql+asyncpg",
    }.get(scheme.lower())
    if driver is None:
        raise StoreURLError(f"store.url scheme {scheme!r} is not supported; use sqlite:///… or postgresql://…")
    return f"{driver}://{rest}"


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    sqlite_settings(dbapi_connection)  # `_sqlite_begin` says when and how a transaction starts


def _sqlite_begin(conn: Any) -> None:
    # A writing transaction takes the write lock at once (BEGIN IMMEDIATE): two workers that both read, then write,
    # would otherwise find each other's write lock mid-transaction and fail or wait out the busy timeout.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writes") else "BEGIN")


class Database(RunReads):
    """One store's engine and SQL: its writes and upkeep here, its reads in `RunReads`."""

    def __init__(self, url: str) -> None:
        self.url = make_url(engine_url(url))
        self.dialect = self.url.get_backend_name()
        file = self.url.database if self.dialect == "sqlite" and self.url.database not in ("", ":memory:") else None
        self._folder = None if file is None else os.path.dirname(os.path.abspath(file))
        try:
            self.engine: AsyncEngine = create_async_engine(self.url)
        except ImportError as exc:  # the database driver is an extra: say which
            extra, driver = ("postgres", "asyncpg") if self.dialect == "postgresql" else ("store", "aiosqlite")
            raise ImportError(
                f"a {self.dialect} run store needs the {extra} extra ({driver}): pip install 'adapter_critic[{extra}]'",
                name=exc.name,
            ) from None
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
        self._writer = writing(self.engine)  # for transactions that write
        self._statements = statements(self.engine.dialect)
        self._file = None if file is None else SqliteFile(file, self._statements)  # batches of a SQLite file

    def where(self) -> str:
        """The store's location for a log line (a password masked)."""
        return self.url.render_as_string(hide_password=True)

    async def upgrade(self) -> int:
        """Create or upgrade the schema (and a SQLite file's directory); returns the version found."""
        folder = self._folder
        if folder is not None:
            await anyio.to_thread.run_sync(lambda: os.makedirs(folder, exist_ok=True))
        for attempt in range(3):
            try:
                async with self._writer.begin() as conn:
                    return await conn.run_sync(upgrade)
            except DBAPIError:
                # SQLite has no lock for DDL: workers starting together may both create a table; the loser retries
                # and finds it there. (PostgreSQL upgrades under an advisory lock.)
                if self.dialect != "sqlite" or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        try:
            if self._file is not None:
                await self._file.aclose()
        finally:
            await self.engine.dispose()

    # -- writing ---------------------------------------------------------------------------------------------------
    async def write(self, batch: Sequence[Record], instance: str, clean: Cleaner, *, backlog: float = 0.0) -> None:
        """Write a batch in one transaction (`writes`). Its rows are made on the event loop in slices, the loop free
        to serve requests between them: made at once, a loaded server's batch held the loop for milliseconds, a
        tail on every request that waited behind it.

        `backlog` is how full the store's queue is (0 to 1) with the batch taken: the fuller, the longer each slice
        and, for a SQLite file, the batch written on a thread at the server's own priority (`SqliteFile.write`).
        On a saturated loop a slice is all the writer gets in one of the loop's turns: with short slices only, it
        fell behind and the queue overflowed; a queue backing up means the requests are waiting anyway."""
        steps = building(batch, instance, clean, slice_seconds(backlog))
        while True:
            try:
                next(steps)
            except StopIteration as done:
                rows: BatchRows = done.value
                break
            await anyio.lowlevel.checkpoint()
        if self._file is not None:
            await self._file.write(rows, urgent=urgent(len(batch), backlog))
            return
        async with self._writer.begin() as conn:
            await write_async(conn, rows, self._statements)

    @property
    def shareable(self) -> bool:
        """Whether another process can write to this store (not an in-memory SQLite database)."""
        return self.dialect != "sqlite" or self._file is not None

    async def write_made(self, rows: BatchRows, thread: concurrent.futures.Executor) -> None:
        """Write rows made already (`writes.batch_rows`) in one transaction: the store's writer process does, where
        no request waits for it. A SQLite file's batch is written on `thread` (the writer's, at the priority it
        chose), another database's from the event loop."""
        if self._file is not None:
            await asyncio.get_running_loop().run_in_executor(thread, self._file.write_here, rows)
            return
        async with self._writer.begin() as conn:
            await write_async(conn, rows, self._statements)

    # -- instances -------------------------------------------------------------------------------------------------
    async def register(self, instance: str) -> None:
        async with self._writer.begin() as conn:
            await conn.execute(
                instances.insert().values(
                    instance_id=instance,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    heartbeat_at=time.time(),
                    process=process_identity(os.getpid()),
                )
            )

    async def heartbeat(self, instance: str) -> None:
        async with self._writer.begin() as conn:
            await conn.execute(
                update(instances).where(instances.c.instance_id == instance).values(heartbeat_at=time.time())
            )

    async def unregister(self, instance: str) -> None:
        async with self._writer.begin() as conn:
            await conn.execute(delete(instances).where(instances.c.instance_id == instance))

    async def mark_interrupted(self, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> int:
        """Runs left `running` by a server process that is gone (killed, crashed) become `interrupted`: a process
        on this host (and in this pid namespace) that is no longer alive, or any that has not beaten for
        `STALE_BEATS` beats of `heartbeat_seconds`; returns how many."""
        here = socket.gethostname()
        now = time.time()
        stale = STALE_BEATS * heartbeat_seconds
        async with self._writer.begin() as conn:
            rows = (await conn.execute(select(instances))).mappings().all()
            gone = [
                row["instance_id"]
                for row in rows
                if now - row["heartbeat_at"] > stale
                or (row["hostname"] == here and process_gone(row["pid"], row["process"]))
            ]
            if gone:
                await conn.execute(delete(instances).where(instances.c.instance_id.in_(gone)))
            alive = select(instances.c.instance_id)
            orphaned = update(runs).where(runs.c.status == "running", runs.c.instance.not_in(alive))
            result = await conn.execute(orphaned.values(status="interrupted"))
            return int(result.rowcount)

    # -- retention -------------------------------------------------------------------------------------------------
    async def prune(self, max_age_days: float | None, max_runs: int | None) -> int:
        """Delete runs older than `max_age_days` and all but the newest `max_runs`, with the cache's answers they
        made; returns how many runs."""
        removed = 0
        async with self._writer.begin() as conn:
            doomed: list[Any] = []
            if max_age_days is not None:
                cutoff = time.time() - max_age_days * 86400
                doomed.append(select(runs.c.run_id).where(runs.c.started_at < cutoff))
            if max_runs is not None:
                newest = select(runs.c.run_id).order_by(runs.c.started_at.desc(), runs.c.run_id.desc())
                doomed.append(newest.offset(max_runs))
            for query in doomed:
                ids = (await conn.execute(query)).scalars().all()
                for chunk in range(0, len(ids), 500):
                    part = ids[chunk : chunk + 500]
                    await conn.execute(delete(stages).where(stages.c.run_id.in_(part)))
                    await conn.execute(delete(cache).where(cache.c.run_id.in_(part)))  # their answers go with them
                    await conn.execute(delete(feedback).where(feedback.c.run_id.in_(part)))
                    removed += int((await conn.execute(delete(runs).where(runs.c.run_id.in_(part)))).rowcount)
        return removed

    # -- the exact-match cache -------------------------------------------------------------------------------------
    async def cached(self, key: str, now: float) -> str | None:
        """The cache's entry under `key` (JSON: `cache.entry.CachedRun`) while it has not expired: one read by the
        primary key (a SQLite file's on this thread: `SqliteFile.cached`)."""
        if self._file is not None:
            return self._file.cached(key, now)
        statement = select(cache.c.entry).where(cache.c.key == key, cache.c.expires_at > now)
        async with self.engine.connect() as conn:
            found: str | None = (await conn.execute(statement)).scalar()
        return found

    async def expire_cache(self, now: float) -> int:
        """Delete the cache's expired entries; returns how many."""
        async with self._writer.begin() as conn:
            return int((await conn.execute(delete(cache).where(cache.c.expires_at <= now))).rowcount)
