"""The run store on both backends (SQLite, PostgreSQL): recording, reading, overflow, drain, retention, schema."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import msgspec
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine

from adapter_critic.core import Answer, Usage
from adapter_critic.errors import UpstreamError
from adapter_critic.events import Attempt, StageFinished
from adapter_critic.redact import Secrets
from adapter_critic.store import BadCursor, RunQuery, open_store, sqlitefile, writes
from adapter_critic.store.cleaning import Cleaner
from adapter_critic.store.database import Database, engine_url
from adapter_critic.store.recorder import Record, RunClosed, RunOpened, StageDone
from adapter_critic.store.records import iso
from adapter_critic.store.runstore import RunStore
from adapter_critic.store.schema import VERSION, SchemaTooNew

from ..conftest import TESTS
from .runs import record_run, request

pytestmark = pytest.mark.anyio
T0 = 1_780_000_000.0  # a Unix time in 2026


async def test_a_recorded_run_reads_back_whole(store_url: str) -> None:
    store = await open_store(store_url)
    async with store:
        record_run(store, "run-1", served_model="m-critic", mode="critic", stages=("api_draft", "critic", "api_final"))
        await store.flush()
        run = await store.get_run("run-1")
    assert run is not None
    assert (run.id, run.request_id, run.served_model, run.mode, run.status) == (
        "run-1",
        "run-1",
        "m-critic",
        "critic",
        "ok",
    )
    assert run.finished_at is not None and run.duration_ms is not None and run.usage is not None
    assert run.usage.total_tokens == 9
    assert [s.stage for s in run.stages] == ["api_draft", "critic", "api_final"]
    assert [s.index for s in run.stages] == [0, 1, 2]
    first = run.stages[0]
    assert (first.target_model, first.target_host, first.status) == ("api-model", "upstream.test", "ok")
    assert first.messages == [{"role": "user", "content": "Hello"}] and first.output == "Hi!"
    assert [s.started_offset_ms for s in run.stages] == sorted(s.started_offset_ms for s in run.stages)
    assert run.request is not None and run.request.messages == [{"role": "user", "content": "Hello"}]
    assert run.answer is not None and run.answer.content == "Hi!" and run.answer.finish_reason == "stop"
    assert run.intermediate == {"api_draft": "Hi!", "critic": "Hi!", "api_final": "Hi!"}
    # The detail's JSON is the API's: every documented field is there.
    fields = set(msgspec.json.decode(msgspec.json.encode(run)))
    assert {"id", "object", "request_id", "stages", "capture", "request", "intermediate", "answer", "error"} <= fields


async def test_a_running_run_is_readable_before_it_ends(store_url: str) -> None:
    store = await open_store(store_url)
    async with store:
        record_run(store, "live", stages=("api_draft",), finish=False)
        await store.flush()
        run = await store.get_run("live")
        assert run is not None and run.status == "running" and run.finished_at is None and run.usage is None
        assert [s.stage for s in run.stages] == ["api_draft"]


async def test_metadata_capture_keeps_no_message_text(store_url: str) -> None:
    store = await open_store(store_url)
    async with store:
        record_run(store, "meta", content="private words", answer="private answer", capture="metadata")
        await store.flush()
        run = await store.get_run("meta")
        dump = await _dump(store_url)
    assert run is not None and run.capture == "metadata"
    assert run.request is not None and run.request.messages is None
    assert run.stages[0].messages is None and run.stages[0].output is None
    assert run.intermediate == {"api": None}
    assert run.answer is not None and run.answer.content is None and run.answer.finish_reason == "stop"
    assert "private" not in dump


async def test_a_configured_key_never_reaches_the_store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-Z9x8c7v6b5n4m3"
    monkeypatch.setenv("UPSTREAM_KEY", secret)
    store = await open_store(store_url)
    store.secrets = Secrets(["UPSTREAM_KEY"]).values
    failure = UpstreamError(
        stage="api", target="m@http://x/v1", kind="status", detail=f"answered 401: bad key {secret}"
    )
    async with store:
        record_run(
            store,
            "leaky",
            content=f"my key is {secret}",
            answer=f"you said {secret}",
            stage_error=failure,
            status="error",
            error=failure,
        )
        await store.flush()
        run = await store.get_run("leaky")
        dump = await _dump(store_url)
    assert secret not in dump and "***" in dump
    assert run is not None and run.error is not None and "***" in run.error.message
    assert run.stages[0].error is not None and run.stages[0].error.kind == "status"


async def test_a_key_made_of_digits_leaves_token_counts_readable(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "3")  # a local server's placeholder key; every stage's usage is 1 + 2 = 3
    store = await open_store(store_url)
    store.secrets = Secrets(["UPSTREAM_KEY"]).values
    async with store:
        record_run(store, "counted", content="3 wishes", answer="3 of them")
        await store.flush()
        run = await store.get_run("counted")
    assert run is not None and run.usage is not None and run.usage.total_tokens == 3
    assert run.stages[0].usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert run.request is not None and run.request.messages == [{"role": "user", "content": "*** wishes"}]
    assert run.answer is not None and run.answer.content == "*** of them"


async def test_a_key_made_of_digits_leaves_every_number_the_store_writes_readable(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "0")  # the first stage's index, in `from_stages`, and attempt statuses
    failure = UpstreamError(
        stage="critic", target="m@http://x/v1", kind="status", detail="answered 500", upstream_status=500
    )
    store = await open_store(store_url)
    store.secrets = Secrets(["UPSTREAM_KEY"]).values
    async with store:
        record_run(store, "kept-once", stages=("api_draft", "critic"), answer="a 0 here", stage_error=failure)
        await store.flush()
        run = await store.get_run("kept-once")
    assert run is not None and run.answer is not None and run.answer.content == "a *** here"
    assert run.intermediate == {"api_draft": "a *** here"}
    assert [s.status for s in run.stages] == ["ok", "error"]
    assert run.stages[1].attempts[0].error is not None and run.stages[1].attempts[0].error.status == 500


async def test_list_is_newest_first_with_cursors_and_filters(store_url: str) -> None:
    store = await open_store(store_url)
    async with store:
        for i in range(5):
            mode = "critic" if i % 2 else "direct"
            status = "degraded" if i == 3 else "ok"
            model, rid = f"m-{mode}", f"req-{i % 2}"
            record_run(
                store, f"run-{i}", served_model=model, mode=mode, status=status, request_id=rid, started_at=T0 + i
            )
        await store.flush()
        seen, cursor = [], None
        while True:
            page = await store.list_runs(limit=2, cursor=cursor)
            seen.append([run.id for run in page.data])
            cursor = page.next_cursor
            if cursor is None:
                assert not page.has_more
                break
        assert seen == [["run-4", "run-3"], ["run-2", "run-1"], ["run-0"]]
        assert [r.id for r in (await store.list_runs(RunQuery(mode="critic"))).data] == ["run-3", "run-1"]
        assert [r.id for r in (await store.list_runs(RunQuery(served_model="m-direct"))).data] == [
            "run-4",
            "run-2",
            "run-0",
        ]
        assert [r.id for r in (await store.list_runs(RunQuery(degraded=True))).data] == ["run-3"]
        assert [r.id for r in (await store.list_runs(RunQuery(status="degraded"))).data] == ["run-3"]
        assert [r.id for r in (await store.list_runs(RunQuery(request_id="req-0"))).data] == ["run-4", "run-2", "run-0"]
        middle = await store.list_runs(RunQuery(since=T0 + 1, until=T0 + 3))  # `until` is exclusive
        assert [r.id for r in middle.data] == ["run-2", "run-1"]
        assert (await store.list_runs(RunQuery(since=T0 + 4))).data[0].started_at == iso(T0 + 4)
        with pytest.raises(BadCursor):
            await store.list_runs(cursor="not-a-cursor")


async def test_a_full_queue_drops_records_counts_them_and_warns_once(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(store_url)
    store.queue_size = 4
    caplog.set_level(logging.WARNING, "adapter_critic")
    async with store:
        for i in range(3):  # 3 records each: the second run's stage and end, and the whole third run, are dropped
            record_run(store, f"run-{i}")
        assert store.dropped == 5 and store.queue_depth == 4
        await store.flush()
        first, second, third = [await store.get_run(f"run-{i}") for i in range(3)]
    warnings = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(warnings) == 1
    assert first is not None and first.status == "ok" and len(first.stages) == 1
    assert second is not None and second.status == "running" and second.stages == []
    assert third is None


async def test_a_batch_that_fails_is_counted_and_logged_and_the_next_one_is_written(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "adapter_critic")
    async with await open_store(store_url) as store:
        record_run(store, "twice")
        await store.flush()
        record_run(store, "twice", answer="again")  # the same run id: its batch breaks the primary key
        record_run(store, "lost")  # in the same transaction: rolled back with it
        await store.flush()
        record_run(store, "after")
        await store.flush()
        twice, lost, after = [await store.get_run(run_id) for run_id in ("twice", "lost", "after")]
    assert store.failed == 6
    [warning] = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert warning.startswith("run store: writing 6 record(s) failed: IntegrityError")
    assert "INSERT" not in warning and "again" not in warning  # one line: no statement, no values
    assert twice is not None and twice.answer is not None and twice.answer.content == "Hi!"
    assert lost is None
    assert after is not None and after.status == "ok" and len(after.stages) == 1


async def test_a_new_sqlite_file_gets_8_kib_pages_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as conn:  # a store file made before: 4 KiB pages
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
    for path in (tmp_path / "new.sqlite3", old):
        async with await open_store(f"sqlite:///{path}") as store:
            record_run(store, "one")
            await store.flush()
            assert await store.get_run("one") is not None
    sizes = {}
    for path in (tmp_path / "new.sqlite3", old):
        with contextlib.closing(sqlite3.connect(path)) as conn:
            sizes[path.name] = conn.execute("PRAGMA page_size").fetchone()[0]
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sizes == {"new.sqlite3": 8192, "old.sqlite3": 4096}


async def test_a_run_ended_in_a_later_batch_than_its_stages_keeps_its_texts_in_its_own_end(store_url: str) -> None:
    async with await open_store(store_url) as store:
        end = record_run(store, "long", stages=("api_draft", "critic"), answer="the answer", finish=False)
        await store.flush()  # its stages are written: the end's batch cannot point at them
        end()
        record_run(store, "short", stages=("api_draft", "critic"), answer="the answer")  # all in one batch
        await store.flush()
        long, short = await store.get_run("long"), await store.get_run("short")
        async with store.database.engine.connect() as conn:
            stored = await conn.execute(sqlalchemy.text("SELECT run_id, record FROM runs ORDER BY run_id"))
            ends = {run_id: json.loads(record) for run_id, record in stored}
            rows = await conn.execute(sqlalchemy.text("SELECT run_id, count(*) FROM stages GROUP BY run_id"))
            stage_rows = dict(tuple(row) for row in rows)
    # `long`'s stages are rows; its end holds its texts itself. `short`'s stages are in its end, which names them.
    assert stage_rows == {"long": 2}
    assert ends["long"]["answer"]["content"] == "the answer" and "from_stages" not in ends["long"]
    assert "stages" not in ends["long"]
    assert ends["short"]["answer"]["content"] is None and ends["short"]["from_stages"]["answer"] == 1
    assert [stage["output"] for stage in ends["short"]["stages"]] == ["the answer", "the answer"]
    for run in (long, short):
        assert run is not None and run.answer is not None and run.answer.content == "the answer"
        assert run.intermediate == {"api_draft": "the answer", "critic": "the answer"}


async def test_a_sqlite_file_is_written_on_a_thread_of_lower_priority_that_goes_when_the_store_closes(
    tmp_path: Path,
) -> None:
    before = set(threading.enumerate())

    def writers() -> list[threading.Thread]:
        return [t for t in set(threading.enumerate()) - before if t.name.startswith("adapter-critic-store-writer")]

    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    async with await open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}") as store:
        record_run(store, "one")
        await store.flush()
        assert await store.get_run("one") is not None
        (writer,) = writers()
        assert writer.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, writer.native_id) == min(ours + sqlitefile.WRITER_NICE, 19) > ours
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours  # the loop's thread: unchanged
    writer.join(timeout=10)
    assert not writer.is_alive()


async def test_a_backed_up_queue_is_written_at_the_servers_priority_in_longer_slices(tmp_path: Path) -> None:
    assert writes.slice_seconds(0.0) == writes.SLICE_SECONDS
    assert writes.slice_seconds(1.0) == writes.SLICE_SECONDS * (1 + writes.BACKLOG_SLICES)
    big = writes.LOW_PRIORITY_RECORDS
    assert [writes.urgent(big, 0.0), writes.urgent(big + 1, 0.0), writes.urgent(3, writes.URGENT_BACKLOG)] == [
        False, True, True,
    ]  # fmt: skip
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    before = set(threading.enumerate())
    store = RunStore(Database(f"sqlite:///{tmp_path / 'runs.sqlite3'}"), queue_size=12, batch_size=3)
    await store.start()
    for i in range(4):
        record_run(store, f"run-{i}")  # 12 records: the first batches leave the queue three quarters full
    await store.flush()
    threads = {t.name.rsplit("_", 1)[0]: t for t in set(threading.enumerate()) - before if "store" in t.name}
    nice = {name: os.getpriority(os.PRIO_PROCESS, t.native_id or 0) for name, t in threads.items()}
    lowest = min(ours + sqlitefile.WRITER_NICE, 19)  # 19: the lowest priority there is
    assert nice == {"adapter-critic-store-writer": lowest, "adapter-critic-store-catch-up": ours}
    await store.aclose()
    for thread in threads.values():
        thread.join(timeout=10)
    async with await open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}") as again:
        assert len((await again.list_runs()).data) == 4 and store.dropped == 0


async def test_closing_a_store_drains_its_queue(store_url: str) -> None:
    store = RunStore(Database(store_url))
    await store.start()
    for i in range(50):
        record_run(store, f"run-{i}")
    assert store.queue_depth == 150  # nothing was written yet: the writer has not run
    await store.aclose()
    async with await open_store(store_url) as again:
        page = await again.list_runs(limit=100)
    assert len(page.data) == 50 and {r.status for r in page.data} == {"ok"}


class _HeldDatabase(Database):
    """A database whose first batch waits to be let go, and that notes each batch's size and when the first is
    written."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.batches: list[int] = []
        self.writing, self.release, self.written = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def write(self, batch: Sequence[Record], instance: str, clean: Cleaner, *, backlog: float = 0.0) -> None:
        self.batches.append(len(batch))
        first = len(self.batches) == 1
        if first:
            self.writing.set()
            await self.release.wait()
        await super().write(batch, instance, clean, backlog=backlog)
        if first:
            self.written.set()  # the writer runs on until it next waits: then this test looks


async def test_what_is_queued_while_a_batch_is_written_gathers_for_a_batch_of_its_own(store_url: str) -> None:
    with anyio.fail_after(30):  # a regression fails, not hangs
        database = _HeldDatabase(store_url)
        store = RunStore(database)
        await store.start()
        try:
            record_run(store, "first")
            await database.writing.wait()
            for i in range(3):
                record_run(store, f"later-{i}")
            database.release.set()
            await database.written.wait()
            # The first batch is written; the later runs are not sent at once as a small batch of their own.
            assert database.batches == [3] and store.queue_depth == 9
            await store.flush()
            assert database.batches == [3, 9]
        finally:
            await store.aclose()
    async with await open_store(store_url) as again:
        assert len((await again.list_runs()).data) == 4


async def test_retention_prunes_by_age_and_count(store_url: str) -> None:
    store = await open_store(store_url)
    store.max_age_days, store.max_runs = 5, 3
    async with store:
        old = RunOpened("ancient", "ancient", "m", "direct", False, time.time() - 10 * 86400, "full", request())
        store.enqueue(old)
        for i in range(4):
            record_run(store, f"run-{i}")
        await store.flush()
        assert await store.prune() == 2  # the one too old, then all but the newest 3
        ids = [r.id for r in (await store.list_runs()).data]
        assert ids == ["run-3", "run-2", "run-1"]
        assert await store.get_run("run-0") is None
    assert "run-0" not in await _dump(store_url)  # its stages went with it


async def test_runs_of_a_killed_server_are_marked_interrupted(store_url: str) -> None:
    alive = RunStore(Database(store_url))
    await alive.start()
    try:
        record_run(alive, "still-going", finish=False)
        await alive.flush()
        path = os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        command = [sys.executable, "-m", "tests.store.crashing_writer", store_url]
        async with await anyio.open_process(command, env=env, stdout=subprocess.PIPE) as proc:
            assert proc.stdout is not None
            with anyio.fail_after(60):
                assert (await proc.stdout.receive()).strip() == b"recorded"
            proc.kill()  # no shutdown, no drain: as a crash or SIGKILL leaves it
            await proc.wait()
        restarted = RunStore(Database(store_url))
        await restarted.start()
        await restarted.aclose()
        crashed = await alive.get_run("crashed")
        going = await alive.get_run("still-going")
    finally:
        await alive.aclose()
    assert crashed is not None and crashed.status == "interrupted"
    assert going is not None and going.status == "running"  # its server is alive: not interrupted


async def test_follow_replays_then_tails_a_running_run(store_url: str) -> None:
    store = RunStore(Database(store_url))
    await store.start()
    seen: list[tuple[str, str]] = []
    first_stage = anyio.Event()
    try:
        record_run(store, "tail", stages=("api_draft",), finish=False)
        await store.flush()

        async def follow() -> None:
            async for kind, item in store.follow("tail"):
                seen.append((kind, getattr(item, "stage", None) or item.status))  # type: ignore[union-attr]
                if kind == "stage":
                    first_stage.set()

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await first_stage.wait()
                record_more(store, "tail")  # the rest of the run, written after the follower caught up
    finally:
        await store.aclose()
    assert seen == [("run", "running"), ("stage", "api_draft"), ("stage", "critic"), ("end", "ok")]


def record_more(store: RunStore, run_id: str) -> None:
    """The rest of the run `tail`: its `critic` stage and its end (index 1, after `api_draft`)."""

    finished = StageFinished(
        "critic",
        "critic@http://upstream.test/v1",
        (Attempt("critic@http://upstream.test/v1"),),
        Usage(1, 1, 2),
        3.0,
        "fine",
    )
    store.enqueue(StageDone(run_id, 1, finished, 10.0, None, "full"))
    store.enqueue(RunClosed(run_id, "ok", time.time(), 20.0, Usage(1, 1, 2), None, {}, Answer("x"), "full"))


async def test_schema_is_versioned_and_a_newer_one_is_refused(store_url: str) -> None:
    async with await open_store(store_url):
        pass
    async with await open_store(store_url):  # a second start finds it current
        pass
    engine = create_async_engine(engine_url(store_url))
    try:
        async with engine.begin() as conn:
            assert (await conn.execute(sqlalchemy.text("SELECT version FROM schema_version"))).scalar() == VERSION
            await conn.execute(sqlalchemy.text(f"UPDATE schema_version SET version = {VERSION + 1}"))
    finally:
        await engine.dispose()
    with pytest.raises(SchemaTooNew, match="newer than this adapter_critic"):
        await open_store(store_url)


VERSION_5_COLUMNS = [
    *(("runs", name) for name in ("cost_currency", "cost_total", "cost_known", "cost_unknown")),
    ("stages", "cost"),
    ("stages", "cost_currency"),
]
VERSION_8_COLUMNS = [("runs", "parent_run_id"), ("runs", "parent_stage"), ("stages", "child_run_id")]


async def test_a_version_1_store_is_upgraded_and_its_runs_read_as_before(store_url: str) -> None:
    async with await open_store(store_url) as store:
        end = record_run(store, "old", stages=("api_draft", "critic"), finish=False)
        await store.flush()
        end()  # ended in a later batch: its texts are in its own row, as version 1 kept them
        await store.flush()
    engine = create_async_engine(engine_url(store_url))
    try:
        # Back to version 1's shape: no `request_messages`, `from_stages`, `record`, costs, `instances.process`, nor
        # the links of child runs, nor the cache's table and the cache hits' link.
        async with engine.begin() as conn:
            [record] = (await conn.execute(sqlalchemy.text("SELECT record FROM runs"))).scalars().all()
            ended = json.loads(record)  # its end as version 1 wrote it: in the columns of its own
            columns = {name: json.dumps(ended[name]) for name in ("intermediate", "answer")}
            ending = "UPDATE runs SET intermediate = :intermediate, answer = :answer"
            await conn.execute(sqlalchemy.text(ending), columns)
            await conn.execute(sqlalchemy.text("ALTER TABLE stages DROP COLUMN request_messages"))
            await conn.execute(sqlalchemy.text("ALTER TABLE runs DROP COLUMN from_stages"))
            await conn.execute(sqlalchemy.text("ALTER TABLE runs DROP COLUMN record"))
            await conn.execute(sqlalchemy.text("DROP INDEX runs_parent"))
            for table, column in (*VERSION_5_COLUMNS, *VERSION_8_COLUMNS):
                await conn.execute(sqlalchemy.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            await conn.execute(sqlalchemy.text("ALTER TABLE instances DROP COLUMN process"))
            await conn.execute(sqlalchemy.text("ALTER TABLE runs DROP COLUMN cached_from"))
            await conn.execute(sqlalchemy.text("DROP TABLE cache"))
            await conn.execute(sqlalchemy.text("DROP TABLE feedback"))
            for table in ("lessons", "route_policies", "shadows"):
                await conn.execute(sqlalchemy.text(f"DROP TABLE {table}"))
            await conn.execute(sqlalchemy.text("UPDATE schema_version SET version = 1"))
    finally:
        await engine.dispose()
    async with await open_store(store_url) as store:
        old = await store.get_run("old")
        record_run(store, "new")
        await store.flush()
        new = await store.get_run("new")
    assert old is not None and [s.messages for s in old.stages] == [[{"role": "user", "content": "Hello"}]] * 2
    assert old.answer is not None and old.answer.content == "Hi!" and old.intermediate["critic"] == "Hi!"
    assert new is not None and new.stages[0].messages == [{"role": "user", "content": "Hello"}]
    assert old.parent_run_id is None and old.children == [] and old.stages[0].child_run_id is None
    engine = create_async_engine(engine_url(store_url))
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(sqlalchemy.text("SELECT version FROM schema_version"))).scalar() == VERSION == 12
            flags = (await conn.execute(sqlalchemy.text("SELECT request_messages FROM stages"))).scalars().all()
            await conn.execute(sqlalchemy.text("SELECT process FROM instances"))  # version 6's column is back
            await conn.execute(sqlalchemy.text("SELECT key, entry, cached_from FROM cache, runs"))  # and version 9's
            await conn.execute(sqlalchemy.text("SELECT feedback_id, verdict FROM feedback"))  # and version 10's
            await conn.execute(sqlalchemy.text("SELECT served_model, version, status FROM lessons"))  # and 11's
            await conn.execute(sqlalchemy.text("SELECT policy FROM route_policies"))  # and 12's
            await conn.execute(sqlalchemy.text("SELECT live_run_id, outcome, detail FROM shadows"))
    finally:
        await engine.dispose()
    assert [bool(flag) for flag in flags] == [False, False]  # the old run's stages; the new one's is in its end


async def _dump(url: str) -> str:
    """Every value of every table, as text."""
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            rows = []
            for table in ("runs", "stages", "instances"):
                rows += [repr(tuple(row)) for row in await conn.execute(sqlalchemy.text(f"SELECT * FROM {table}"))]
    finally:
        await engine.dispose()
    return "\n".join(rows)
