"""A server process that records a run and is then killed: `python -m tests.store.crashing_writer URL`.

It starts a store at URL, records the start of run `crashed`, prints `recorded` once it is written and waits to
be killed."""

from __future__ import annotations

import asyncio
import sys

from adapter_critic.store.database import Database
from adapter_critic.store.runstore import RunStore

from .runs import record_run


async def main(url: str) -> None:
    store = RunStore(Database(url))
    await store.start()
    record_run(store, "crashed", finish=False)
    await store.flush()
    print("recorded", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
