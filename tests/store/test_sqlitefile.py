"""A SQLite file's batches: written on the event loop's thread while it can neither wait nor sync, on a worker
thread when another process holds the write lock or the disk is slow; checkpoints beside the writing."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter_critic.store import sqlitefile
from adapter_critic.store.sqlitefile import Params, SqliteFile

pytestmark = pytest.mark.anyio

INSERT = "INSERT INTO t (n, text) VALUES (?, ?)"


@pytest.fixture
async def file(tmp_path: Path) -> AsyncIterator[SqliteFile]:
    path = tmp_path / "runs.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        sqlitefile.sqlite_settings(conn)
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, text TEXT)")
    file = SqliteFile(str(path))
    try:
        yield file
    finally:
        await file.aclose()


def batch(first: int, count: int) -> Params:
    return [(INSERT, [(n, "x" * 2000) for n in range(first, first + count)])]


def file_size(path: str) -> int:
    return Path(path).stat().st_size


def numbers(path: str) -> list[int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [n for (n,) in conn.execute("SELECT n FROM t ORDER BY n")]


async def test_a_batch_is_written_on_the_loop_and_never_checkpoints_there(file: SqliteFile) -> None:
    await file.write(batch(0, 150))
    assert (file.on_loop, file.on_thread, file.checkpoints) == (1, 0, 0)
    assert numbers(file.path) == list(range(150))
    # The rows are in the WAL, not yet in the file: the loop's connection did not fold them back.
    assert file_size(file.path) < 150 * 2000


async def test_a_locked_file_sends_the_batch_to_a_worker_thread_that_waits_for_the_lock(file: SqliteFile) -> None:
    other = sqlite3.connect(file.path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's writer, mid-transaction
        writing = asyncio.get_running_loop().create_task(file.write(batch(0, 10)))
        await asyncio.sleep(0)  # the task runs until it waits on the worker thread: the loop did not wait
        assert (file.on_loop, file.on_thread) == (0, 1)
        assert not writing.done()
        other.execute("COMMIT")
        await writing
    finally:
        other.close()
    assert numbers(file.path) == list(range(10))
    await file.write(batch(10, 5))  # the lock is free again: back on the loop
    assert (file.on_loop, file.on_thread) == (1, 1)


async def test_a_worker_thread_checkpoints_after_enough_rows(file: SqliteFile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlitefile, "CHECKPOINT_ROWS", 100)
    await file.write(batch(0, 60))
    assert file.checkpoints == 0
    await file.write(batch(60, 60))
    checkpointing = file._checkpointing
    assert checkpointing is not None
    await checkpointing
    assert file.checkpoints == 1
    assert file_size(file.path) > 120 * 2000  # folded back into the file
    assert numbers(file.path) == list(range(120))


async def test_a_slow_chunk_sends_the_next_batches_to_a_worker_thread(
    file: SqliteFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlitefile, "SLOW_SECONDS", -1.0)  # every chunk counts as slow
    await file.write(batch(0, 10))
    await file.write(batch(10, 10))
    assert (file.on_loop, file.on_thread) == (1, 1)
    assert numbers(file.path) == list(range(20))


async def test_a_batch_cancelled_between_chunks_is_still_written_whole(
    file: SqliteFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlitefile, "CHUNK_ROWS", 2)
    writing = asyncio.get_running_loop().create_task(file.write(batch(0, 7)))
    await asyncio.sleep(0)  # the first chunk is written, the task yields
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert numbers(file.path) == list(range(7))


async def test_a_failing_batch_is_rolled_back_and_the_file_stays_usable(file: SqliteFile) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        await file.write([(INSERT, [(1, "a"), (2, "b"), (1, "again")])])
    await file.write(batch(5, 2))
    assert numbers(file.path) == [5, 6]
