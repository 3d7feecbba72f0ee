"""The store's writer process (`store.writer`, `store.writerprocess`, `store.wire`): the rows it writes are the
rows the server would have written; a clean shutdown loses nothing; a killed writer is replaced; feedback, the
cache's `on_written` and masking go through it; it never outlives the server."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine

from adapter_critic.cache.entry import CachedAnswer, CachedRun
from adapter_critic.core import Answer, Usage
from adapter_critic.errors import APIError, UpstreamError
from adapter_critic.events import Attempt, Cost, StageFinished
from adapter_critic.redact import Secrets
from adapter_critic.store import writer
from adapter_critic.store.database import Database, engine_url
from adapter_critic.store.recorder import CachePut, FeedbackGiven, Record, RunClosed, RunOpened, StageDone
from adapter_critic.store.records import RunSummary
from adapter_critic.store.runstore import RunStore
from adapter_critic.store.writerprocess import WriterProcess

from ..conftest import TESTS
from .runs import TARGET, record_run, request

pytestmark = pytest.mark.anyio
SECRET = "sk-live-Q1w2e3r4t5y6u7"


def processed(url: str, **options: object) -> RunStore:
    return RunStore(Database(url), writer="process", **options)  # type: ignore[arg-type]


async def _stored(url: str) -> list[RunSummary]:
    """The runs in the store at `url`, read by a store of its own (up to 100)."""
    again = RunStore(Database(url))
    try:
        return (await again.list_runs(limit=100)).data
    finally:
        await again.aclose()


@contextlib.asynccontextmanager
async def written_once(url: str, run_id: str) -> AsyncIterator[tuple[RunStore, WriterProcess]]:
    """A store whose writer process has written the run `run_id`, and its `WriterProcess`; closed after."""
    store = processed(url)
    await store.start()
    try:
        record_run(store, run_id)
        await store.flush()
        assert store.process is not None and store.process.running is not None
        yield store, store.process
    finally:
        await store.aclose()


async def _rows(url: str) -> list[tuple[object, ...]]:
    """Every row of the tables a batch writes (the run's `instance` left out: each store has its own)."""
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            found = []
            for table, order in (("runs", "run_id"), ("stages", "run_id, idx"), ("cache", "key"), ("feedback", "1")):
                rows = await conn.execute(sqlalchemy.text(f"SELECT * FROM {table} ORDER BY {order}"))
                for row in rows.mappings():
                    found.append((table, *sorted((k, v) for k, v in row.items() if k != "instance")))
    finally:
        await engine.dispose()
    return found


def _every_kind(store: RunStore) -> None:
    """Runs and records of every shape the wire carries: stages that failed (an attempt and the call), an error the
    client got, costs, a run that goes on past its batch, tool calls, `intermediate`, capture `metadata`, a
    forwarded caller's token, a cached answer, a feedback entry — the secret in every text."""
    failure = UpstreamError(
        stage="critic", target=TARGET, kind="status", detail=f"answered 401: {SECRET}", upstream_status=401
    )
    record_run(store, "plain", content=f"key {SECRET}", answer=f"said {SECRET}", costs=(0.5,))
    record_run(store, "failed", stages=("api", "critic"), stage_error=failure, status="error", error=failure)
    record_run(store, "meta", capture="metadata", content=f"private {SECRET}")
    end = record_run(store, "later", stages=("api", "critic"), finish=False)
    ask = request("streamed", stream=True, temperature=0.5)
    store.enqueue(RunOpened("tools", "rq", "m", "direct", True, 1.0, "full", ask, "caller-token-123", "k"))
    finished = StageFinished("api", TARGET, (Attempt(TARGET),), Usage(1, 2, 3), 4.0, "out", None, True, "tool_calls")
    store.enqueue(StageDone("tools", 0, finished, 0.5, [{"role": "user", "content": "caller-token-123"}], "full"))
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": "caller-token-123"}'}}]
    cost = Cost("EUR", {"api": None}, None, 0.0, ["api"])
    answer = Answer(None, calls, "tool_calls")
    error = APIError(f"refused {SECRET}", status_code=400, param="x", code="bad")
    usage = Usage(1, 2, 3, prompt_tokens_details={"cached_tokens": 1})
    closed = RunClosed("tools", "error", 2.0, 9.0, usage, error, {"draft": "out", "n": 2}, answer, "full", None, cost)
    closed.secret = "caller-token-123"
    store.enqueue(closed)
    entry = CachedRun("tools", "m", "direct", 3.0, CachedAnswer(f"cached {SECRET}", None, "stop"), created_at=1.0)
    store.enqueue(CachePut("key-1", "tools", "m", entry, 1.0, 99.0, None))
    store.enqueue(FeedbackGiven("fb_1", "plain", 5.0, -1.0, label="bad", comment=f"saw {SECRET}", verdict="reject"))
    end()


async def test_the_writer_process_writes_the_rows_the_server_would_have(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", SECRET)
    secrets = Secrets(["UPSTREAM_KEY"]).values
    inline_url = f"sqlite:///{tmp_path / 'inline.sqlite3'}"
    made = RunStore(Database("sqlite:///:memory:"))
    records: list[Record] = []
    made.enqueue = records.append  # type: ignore[method-assign]
    _every_kind(made)  # the same records (and times) for both
    for url, kind in ((store_url, "process"), (inline_url, "inline")):
        store = RunStore(Database(url), secrets=secrets, writer=kind)  # type: ignore[arg-type]
        await store.start()
        assert (store.process is not None) == (kind == "process")
        for record in records:
            store.enqueue(record)
        await store.flush()
        assert store.failed == 0
        await store.aclose()
    written, expected = await _rows(store_url), await _rows(inline_url)
    assert written == expected
    text = repr(written)
    assert SECRET not in text and "caller-token-123" not in text and "***" in text
    assert len([row for row in written if row[0] == "runs"]) == 5


async def test_a_clean_shutdown_writes_every_record_queued_before_it(store_url: str) -> None:
    store = processed(store_url, batch_size=7)  # many batches
    await store.start()
    for number in range(20):
        record_run(store, f"run-{number:02}")
    await store.flush()  # through the writer
    assert store.process is not None and store.process.running is not None
    writer = store.process.running
    for number in range(20, 40):
        record_run(store, f"run-{number:02}")
    assert store.queue_depth > 0
    await store.aclose()  # no flush: closing writes what is queued here, and the writer exits
    assert writer.returncode == 0
    runs = await _stored(store_url)
    assert sorted(run.id for run in runs) == [f"run-{number:02}" for number in range(40)]
    assert {run.status for run in runs} == {"ok"} and store.failed == 0 and store.dropped == 0


async def test_what_is_queued_at_a_clean_shutdown_is_written_without_starting_a_writer(store_url: str) -> None:
    # A writer at the lowest priority, started for the drain on a machine busy with other processes, held the
    # shutdown for seconds: what is queued when the store closes is written in the server's process.
    store = processed(store_url)
    await store.start()
    for number in range(5):
        record_run(store, f"late-{number}")
    await store.aclose()
    assert store.process is not None and store.process.pid is None  # never started
    assert sorted(run.id for run in await _stored(store_url)) == [f"late-{number}" for number in range(5)]


async def test_big_answers_go_through_the_writer_whole_among_small_ones(store_url: str) -> None:
    # A record of a piece or more is written from itself, a piece at a time; the writer reads a frame into one
    # buffer: texts that straddle every piece boundary, before and after small records of the same frame.
    from adapter_critic.store.writerprocess import PIECE_BYTES

    store = processed(store_url)
    await store.start()
    big = {f"big-{n}": f"{n}é" + "".join(f"{i:07} " for i in range(size)) for n, size in enumerate((9_000, 70_000))}
    record_run(store, "small-1")
    for run_id, answer in big.items():
        record_run(store, run_id, answer=answer)
    record_run(store, "small-2")
    await store.flush()
    try:
        assert store.failed == 0 and store.process is not None and store.process.pid is not None
        for run_id, answer in big.items():
            detail = await store.get_run(run_id)
            assert detail is not None and detail.answer.content == answer
        assert len(big["big-1"]) > 8 * PIECE_BYTES
        assert {run.id for run in (await store.list_runs(limit=10)).data} == {"small-1", "small-2", *big}
    finally:
        await store.aclose()


class _Pipe:
    """What `writerprocess._send` writes, as it writes it."""

    def __init__(self) -> None:
        self.writes: list[bytes | memoryview] = []

    def write(self, data: bytes | memoryview) -> None:
        self.writes.append(data)

    async def drain(self) -> None:
        return None


async def test_a_big_record_goes_down_the_pipe_from_itself_a_piece_at_a_time() -> None:
    from adapter_critic.store.writerprocess import PIECE_BYTES, _send

    head, small, big, last = b"head", b"s" * 100, bytes(range(256)) * 1000, b"t" * 50
    pipe = _Pipe()
    await _send(pipe, head, [small, big, last], PIECE_BYTES)  # type: ignore[arg-type]
    assert b"".join(pipe.writes) == head + small + big + last  # the frame, in order
    pieces = [w for w in pipe.writes if isinstance(w, memoryview)]
    assert all(w.obj is big and len(w) <= PIECE_BYTES for w in pieces)  # views of it, never a copy of it whole
    assert b"".join(pieces) == big and len(pieces) == -(-len(big) // PIECE_BYTES)


def _threads(pid: int) -> dict[str, int]:
    """Each thread of process `pid` by its name: its nice value (Linux: a thread's own)."""
    found = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/comm") as comm, open(f"/proc/{pid}/task/{task}/stat") as stat:
            name = "main" if int(task) == pid else comm.read().strip()
            found[name] = int(stat.read().rsplit(")", 1)[1].split()[16])
    return found


async def test_the_writer_writes_at_the_lowest_priority_unless_the_queue_backs_up(
    store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    async with written_once(store_url, "calm") as (store, process):
        assert process.running is not None
        pid = process.running.pid
        calm = _threads(pid)
        assert calm[writer.WRITING] == 19 and calm["main"] == 0  # written at the lowest priority; the process is not
        assert writer.CATCHING_UP not in calm  # started at the first batch behind
        store.queue_size, store.batch_size = 40, 3  # 15 records: batches taken with a quarter of the queue behind
        for number in range(5):
            record_run(store, f"behind-{number}")
        await store.flush()
        behind = _threads(pid)
        assert behind[writer.CATCHING_UP] == 0 and behind[writer.WRITING] == 19
        assert store.failed == 0 and await store.get_run("behind-4") is not None
        said = [line for line in capfd.readouterr().err.splitlines() if "queue backs up" in line]
        assert len(said) == 1 and f"(pid {pid})" in said[0]  # once, however many batches were behind


async def test_a_killed_writer_is_replaced_logged_once_and_recording_goes_on(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with written_once(store_url, "before") as (store, process):
        killed = process.running
        assert killed is not None
        os.kill(killed.pid, signal.SIGKILL)
        assert await killed.wait() == -signal.SIGKILL
        with caplog.at_level(logging.WARNING, logger="adapter_critic"):
            record_run(store, "after")
            await store.flush()
        assert process.running is not None and process.running.pid != killed.pid
        assert await store.get_run("after") is not None and await store.get_run("before") is not None
        assert store.failed == 0  # it died between batches: nothing of the next one was lost
        assert process.restarts == 1
        (warning,) = [r.getMessage() for r in caplog.records if "writer process" in r.getMessage()]
        assert f"pid {killed.pid}" in warning and "SIGKILL" in warning


async def test_a_writer_killed_with_a_batch_loses_at_most_that_batch(store_url: str, tmp_path: Path) -> None:
    async with written_once(store_url, "first") as (store, process):
        assert process.running is not None
        pid = process.running.pid
        os.kill(pid, signal.SIGKILL)  # not waited for: the next batch may be sent to it before its death is seen
        record_run(store, "lost-or-not")
        await store.flush()
        assert store.failed in (0, 3)  # at most that batch: a run's three records
        record_run(store, "later")
        await store.flush()
        assert await store.get_run("later") is not None
        assert process.running is not None and process.running.pid != pid


async def test_feedback_is_written_through_the_writer_and_read_back(store_url: str) -> None:
    store = processed(store_url)
    await store.start()
    try:
        record_run(store, "judged")
        given = FeedbackGiven("fb_9", "judged", 5.0, 1.0, label="good", comment="fine", stage="api", stage_index=0)
        kept = await store.give_feedback(given)
        assert store.process is not None and store.process.running is not None  # written by the process
    finally:
        await store.aclose()
    assert (kept.id, kept.run_id, kept.score, kept.label, kept.stage) == ("fb_9", "judged", 1.0, "good", "api")


async def test_the_cache_learns_which_answers_the_writer_has_written(store_url: str) -> None:
    store = processed(store_url)
    told: list[list[str]] = []
    store.on_written = lambda batch: told.append([r.key for r in batch if isinstance(r, CachePut)])
    await store.start()
    try:
        record_run(store, "cached")
        entry = CachedRun("cached", "m", "direct", 3.0, CachedAnswer("Hi!", None, "stop"), created_at=1.0)
        store.enqueue(CachePut("k-1", "cached", "m", entry, 1.0, 4e9, None))
        await store.flush()
        assert told == [["k-1"]]
        found = await store.database.cached("k-1", 2.0)  # there once `on_written` says so
    finally:
        await store.aclose()
    assert found is not None and '"Hi!"' in found


async def test_secrets_read_for_each_batch_are_masked_by_the_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    keys = ["sk-old-key-0001"]
    store = processed(url, secrets=lambda: keys)
    await store.start()
    try:
        record_run(store, "old", content="sk-old-key-0001 and sk-new-key-0002")
        await store.flush()
        keys[:] = ["sk-new-key-0002"]  # rotated
        record_run(store, "new", content="sk-old-key-0001 and sk-new-key-0002")
        await store.flush()
        old, new = await store.get_run("old"), await store.get_run("new")
    finally:
        await store.aclose()
    assert old is not None and old.request is not None and new is not None and new.request is not None
    assert old.request.messages == [{"role": "user", "content": "*** and sk-new-key-0002"}]
    assert new.request.messages == [{"role": "user", "content": "sk-old-key-0001 and ***"}]


async def test_an_in_memory_store_is_written_in_the_servers_process() -> None:
    store = processed("sqlite:///:memory:")
    await store.start()
    try:
        record_run(store, "here")
        await store.flush()
        assert store.process is None and await store.get_run("here") is not None
    finally:
        await store.aclose()


async def test_the_writer_holds_no_file_of_the_servers(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listening = os.readlink(f"/proc/self/fd/{listener.fileno()}")  # socket:[inode]
    store = processed(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    await store.start()
    try:
        record_run(store, "one")
        await store.flush()
        assert store.process is not None and store.process.running is not None
        fds = f"/proc/{store.process.running.pid}/fd"
        targets = {os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)}
    finally:
        await store.aclose()
        listener.close()
    assert listening not in targets and str(tmp_path / "runs.sqlite3") in targets


def test_the_writer_exits_when_the_server_is_killed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.store.crashing_writer", url, "process"],
        stdout=subprocess.PIPE,
        cwd=TESTS.parent,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])),
        },
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        assert line.startswith("recorded writer="), line
        writer = int(line.split("=")[1])
        exited = os.pidfd_open(writer)
        server.kill()
        server.wait()
        ready, _, _ = select.select([exited], [], [], 60)  # readable once the writer has exited
        os.close(exited)
        assert ready, "the writer outlived the server"
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


async def test_a_writer_that_cannot_start_leaves_the_writing_to_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")  # every writer exits at once
    store = processed(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    await store.start()
    try:
        with caplog.at_level(logging.WARNING, logger="adapter_critic"):
            for number in range(4):
                record_run(store, f"run-{number}")
                await store.flush()
        assert store.process is None  # given up: written here
        page = await store.list_runs()
        assert sorted(run.id for run in page.data) == [f"run-{number}" for number in range(4)]
        assert store.failed == 0
        assert any("every batch from now on" in r.getMessage() for r in caplog.records)
    finally:
        await store.aclose()


def test_a_frame_is_one_write_of_many_records() -> None:
    from adapter_critic.store import wire

    records: list[Record] = []
    store = RunStore(Database("sqlite:///:memory:"))
    store.enqueue = records.append  # type: ignore[method-assign]
    record_run(store, "one")
    record_run(store, "two")
    encoded = [wire.encode(record) for record in records]
    frame = wire.frame(1, "instance", ["s"], encoded)
    head_length, body_length = wire.HEAD.unpack(frame[: wire.HEAD.size])
    head = wire.head_decoder.decode(frame[wire.HEAD.size : wire.HEAD.size + head_length])
    body = wire.body_decoder.decode(frame[wire.HEAD.size + head_length :])
    assert (head.seq, head.instance, head.secrets) == (1, "instance", ["s"])
    assert len(body) == 6 and len(frame) == wire.HEAD.size + head_length + body_length
    rebuilt = writer.records(body)
    assert [type(r).__name__ for r in rebuilt] == [type(r).__name__ for r in records]


def test_the_writer_runs_on_the_cores_the_server_is_not_pinned_to() -> None:
    own = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(own)})  # as a server pinned to one core, whose affinity the writer inherits
        writer.off_the_servers_cores()
        # On a machine of one core there is nowhere else to go: it stays where it is.
        assert os.sched_getaffinity(0) == (own - {min(own)} or {min(own)})
    finally:
        os.sched_setaffinity(0, own)
