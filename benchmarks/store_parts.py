"""`python -m benchmarks.store_parts <uvicorn args>`: uvicorn with the run store cut short where `STORE_PART` says,
to see where recording's cost goes in a server under load (`python -m benchmarks.store --parts`):

- `recorder`: each run's recorder makes its records, and the store drops them at its queue;
- `queued`: the records are queued and taken in batches by the writer, then dropped: no rows, no SQLite;
- `rows`: each batch is turned into rows (encoded, every secret masked), and not written;
- `sent`: each record is encoded as it is queued and each batch's frame head made (`store.wire`), and neither sent
  to the writer process nor written (the store's `writer = "process"`; the two above cut the inline writer).

The store is otherwise the server's own (started, its upkeep running); each cut is the one method that does that
part, replaced in this process only. Without `STORE_PART` this is plain uvicorn. `SWITCH_INTERVAL` (seconds) sets
`sys.setswitchinterval`: how long another thread may hold the GIL before the event loop's thread gets it back.
`WRITER_NICE` sets how much lower the SQLite writer thread's priority is (`store.sqlitefile.WRITER_NICE`; 0: the
server's own), `SLICE_SECONDS` how long rows are made between two returns to the event loop
(`store.writes.SLICE_SECONDS`).
`GC_TRACE` (a file) writes there, when the server stops, every garbage collection it made: its generation, the CPU
time it took on its thread (`time.thread_time`, which other processes on the core do not inflate) and the thread.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from adapter_critic.store import sqlitefile, writes
from adapter_critic.store.cleaning import Cleaner
from adapter_critic.store.database import Database
from adapter_critic.store.recorder import Record
from adapter_critic.store.runstore import RunStore
from adapter_critic.store.sqlitefile import SqliteFile
from adapter_critic.store.writerprocess import WriterProcess
from adapter_critic.store.writes import BatchRows


def _dropped(self: RunStore, record: Record) -> None:
    return None


async def _not_written(
    self: Database, batch: Sequence[Record], instance: str, clean: Cleaner, *, backlog: float = 0.0
) -> None:
    return None


async def _rows_only(self: SqliteFile, rows: BatchRows, *, urgent: bool = False) -> None:  # rows made, not written
    return None


async def _not_sent(self: WriterProcess, head: bytes, records: Sequence[bytes], seq: int, hurry: bool = False) -> None:
    return None


# Per part: the class and method that do the next part, and what replaces it.
CUTS: dict[str, tuple[Any, str, Any]] = {
    "recorder": (RunStore, "enqueue", _dropped),
    "queued": (Database, "write", _not_written),
    "rows": (SqliteFile, "write", _rows_only),
    "sent": (WriterProcess, "write", _not_sent),
}
PARTS = tuple(CUTS)


def cut(part: str) -> None:
    """Cut the store short at `part` (one of `PARTS`) in this process."""
    owner, name, replacement = CUTS[part]
    setattr(owner, name, replacement)


def trace_collections(path: str) -> None:
    """Note every collection (generation, CPU seconds on its thread, thread name) and write them to `path` at exit."""
    made: list[tuple[int, float, str]] = []
    began: dict[int, float] = {}

    def noted(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[threading.get_ident()] = time.thread_time()
        elif (start := began.pop(threading.get_ident(), None)) is not None:
            made.append((info["generation"], time.thread_time() - start, threading.current_thread().name))

    def written() -> None:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(made, file)

    gc.callbacks.append(noted)
    atexit.register(written)
    # uvicorn stops on SIGTERM, then raises it again with the handler it found: this one exits, so `written` runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


if os.environ.get("STORE_PART"):
    cut(os.environ["STORE_PART"])
if os.environ.get("GC_TRACE"):
    trace_collections(os.environ["GC_TRACE"])
if os.environ.get("SLICE_SECONDS"):
    writes.SLICE_SECONDS = float(os.environ["SLICE_SECONDS"])
if os.environ.get("WRITER_NICE"):
    sqlitefile.WRITER_NICE = int(os.environ["WRITER_NICE"])
if os.environ.get("SWITCH_INTERVAL"):
    sys.setswitchinterval(float(os.environ["SWITCH_INTERVAL"]))

import uvicorn.main  # noqa: E402

if __name__ == "__main__":
    uvicorn.main.main()
