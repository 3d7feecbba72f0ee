"""A server process that records a run and is then killed: `python -m tests.store.crashing_writer URL [process]`.

It starts a store at URL, records the start of run `crashed`, prints `recorded` once it is written and waits to
be killed. With `process`, the store writes through its writer process, and the line is `recorded writer=<pid>`."""

from __future__ import annotations

import asyncio
import sys

from adapter_critic.store.database import Database
from adapter_critic.store.runstore import RunStore

from .runs import record_run


async def main(url: str, writer: str) -> None:
    store = RunStore(Database(url), writer="process" if writer == "process" else "inline")
    await store.start()
    record_run(store, "crashed", finish=False)
    await store.flush()
    running = store.process.running if store.process is not None else None
    print("recorded" if running is None else f"recorded writer={running.pid}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "inline"))
