"""What recording one direct run costs, in one process (`python -m benchmarks.recording [--quick]`).

A direct run of the benchmark's 1.5 KB request and answer is handed to a `RunRecorder` as a server would (its
events), and its records are written the way the store's writer does, in batches of 150 runs, to a SQLite file
that grows to 30,000 runs (3,000 with `--quick`):
- `recorder`: a recorder per run, given the run's events, turns them into records and queues them (on the
  request's task, in a server);
- `rows`: a batch's records turned into rows, every value encoded and its secrets masked (`store.writes`);
- `rows + write`: that and the batch written (`Database.write`: the standard library's `sqlite3` on a worker
  thread for a file; its CPU is counted);
- `rows + write, async engine`: the same rows through SQLAlchemy's async engine over aiosqlite, as PostgreSQL and
  an in-memory SQLite store write theirs;
- `encoded (server)`: what a server whose store has a writer process does with a batch's records: each encoded
  (`store.wire.encode`, as it is queued) and the batch's frame made;
- `rebuilt (writer)`: what the writer process does before the rows: the frame's records decoded and rebuilt.
Each figure is CPU µs per run (process time, every thread), the median and the best over the batches after the
first tenth (the file growing meanwhile); and the file's size at the end, in bytes per run. No server and no
network: the figures are what a run costs the store itself; `benchmarks/store.py` measures it in a server under
load.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from adapter_critic.core import Answer, Usage
from adapter_critic.events import Attempt, RunFinished, RunRecord, RunStarted, StageFinished, StageStarted
from adapter_critic.ids import new_id
from adapter_critic.request.decode import decode_request
from adapter_critic.store import wire, writer
from adapter_critic.store.cleaning import Cleaner
from adapter_critic.store.database import Database
from adapter_critic.store.recorder import Record, RunRecorder
from adapter_critic.store.writes import batch_rows, statements, write_async

from . import payloads
from .micro import cli

BATCH = 150
TARGET = "bench-api@http://127.0.0.1:8001/v1"


_REQUEST = decode_request(payloads.request_bytes("bench-direct"))


def run_events() -> tuple[str, list[Any]]:
    """One direct run's id and its events, as the pipeline publishes them (each run its own objects)."""
    run_id = new_id("chatcmpl-")
    record = RunRecord(run_id, "bench-direct", "direct")
    usage = Usage(412, 87, 499)
    events: list[Any] = [
        RunStarted(run_id, "bench-direct", "direct", False),
        StageStarted("api", TARGET, _REQUEST.messages_json),
        StageFinished("api", TARGET, (Attempt(TARGET),), usage, 33.0, payloads.ANSWER, None, True, "stop"),
    ]
    for event in events:
        record.apply(event)
    record.answer = Answer(payloads.ANSWER, None, "stop")
    events.append(RunFinished("ok", record))
    return run_id, events


def recorded(runs: list[tuple[str, list[Any]]]) -> list[Record]:
    """The records a recorder per run queues for `runs`."""
    records: list[Record] = []
    for run_id, events in runs:
        recorder = RunRecorder(records.append, run_id, _REQUEST)
        for event in events:
            recorder(event)
    return records


def _per_run(started: float) -> float:
    return (time.process_time() - started) / BATCH * 1e6


async def measure(runs: int) -> dict[str, Any]:
    figures: dict[str, list[float]] = {
        "recorder": [], "rows": [], "rows + write": [], "rows + write, async engine": [],
        "encoded (server)": [], "rebuilt (writer)": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="adapter-critic-recording-") as tmp:
        databases = {name: Database(f"sqlite:///{Path(tmp) / f'{name}.sqlite3'}") for name in ("file", "engine")}
        for database in databases.values():
            await database.upgrade()
        clean = Cleaner([])
        try:
            for _ in range(runs // BATCH):
                pair = [[run_events() for _ in range(BATCH)] for _ in range(2)]
                started = time.process_time()
                batches = [recorded(part) for part in pair]
                figures["recorder"].append(_per_run(started) / 2)
                started = time.process_time()
                batch_rows(batches[0], "bench", clean)
                figures["rows"].append(_per_run(started))
                started = time.process_time()
                await databases["file"].write(batches[0], "bench", clean)
                figures["rows + write"].append(_per_run(started))
                started = time.process_time()
                engine = databases["engine"].engine
                rows = batch_rows(batches[1], "bench", clean)
                async with engine.execution_options(writes=True).begin() as conn:
                    await write_async(conn, rows, statements(engine.dialect))
                figures["rows + write, async engine"].append(_per_run(started))
                started = time.process_time()
                encoded = [wire.encode(record) for record in batches[1]]
                frame = wire.frame(1, "bench", [], encoded)
                figures["encoded (server)"].append(_per_run(started))
                started = time.process_time()
                head_length, _ = wire.HEAD.unpack(frame[: wire.HEAD.size])
                writer.records(wire.body_decoder.decode(frame[wire.HEAD.size + head_length :]))
                figures["rebuilt (writer)"].append(_per_run(started))
        finally:
            for database in databases.values():
                await database.aclose()
        written = len(figures["rows"]) * BATCH
        file_bytes = _file_bytes(Path(tmp) / "file.sqlite3") / written
    skip = len(figures["rows"]) // 10
    cpu = {
        name: {"median_us": statistics.median(values[skip:]), "best_us": min(values[skip:])}
        for name, values in figures.items()
    }
    return {"cpu_us": cpu, "file_bytes_per_run": file_bytes}


def _file_bytes(path: Path) -> int:
    """The size of the SQLite file at `path` once its WAL is folded in (its pages times their size)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


def run_all(quick: bool = False) -> dict[str, Any]:
    return asyncio.run(measure(3_000 if quick else 30_000))


def table(results: dict[str, Any]) -> str:
    lines = [f"recording one direct run, CPU µs per run (batches of {BATCH})", ""]
    lines.append(f"{'':<30}{'median':>8}{'best':>8}")
    for name, row in results["cpu_us"].items():
        lines.append(f"{name:<30}{row['median_us']:>8.1f}{row['best_us']:>8.1f}")
    lines += ["", f"the SQLite file: {results['file_bytes_per_run']:.0f} bytes per run"]
    return "\n".join(lines)


def main() -> None:
    cli(__doc__, run_all, table)


if __name__ == "__main__":
    main()
