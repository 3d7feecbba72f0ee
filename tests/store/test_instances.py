"""Which server processes are gone, so that the runs they left `running` become `interrupted`: a pid on this host
that a later process reuses (a restarted container's server is pid 1 again) is not the instance's; an instance in
another pid namespace (a container sharing the host's name, as `--network host` does) is gone only once it stops
beating; and `store.heartbeat_seconds` sets how soon that is."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest
from sqlalchemy import update

from adapter_critic.store.database import Database
from adapter_critic.store.processes import process_identity
from adapter_critic.store.runstore import RunStore
from adapter_critic.store.schema import instances

from .runs import record_run

pytestmark = pytest.mark.anyio


async def left_running(url: str, run_id: str, **instance: Any) -> None:
    """A run left `running` by an instance registered as this process is, but with `instance`'s fields."""
    database = Database(url)
    store = RunStore(database)
    store.instance = f"instance-of-{run_id}"
    try:
        await database.upgrade()
        await database.register(store.instance)
        async with database.engine.begin() as conn:
            await conn.execute(update(instances).where(instances.c.instance_id == store.instance).values(**instance))
        record_run(store, run_id, finish=False)
        await store.flush()
    finally:
        await database.aclose()


async def status_after_start(url: str, run_id: str, heartbeat_seconds: float = 30) -> str:
    """The run's status once another server's store has started on `url`."""
    store = RunStore(Database(url), heartbeat_seconds=heartbeat_seconds)
    await store.start()
    try:
        run = await store.get_run(run_id)
    finally:
        await store.aclose()
    assert run is not None
    return run.status


async def test_a_pid_reused_by_a_later_process_is_not_the_instance(store_url: str) -> None:
    own = process_identity(os.getpid())
    assert own is not None
    namespace = own.rpartition("/")[0]
    # Registered by a process with this host's name and this very pid, started at tick 1: an earlier process.
    await left_running(store_url, "before-restart", pid=os.getpid(), process=f"{namespace}/1")
    assert await status_after_start(store_url, "before-restart") == "interrupted"


async def test_an_instance_in_this_process_is_alive(store_url: str) -> None:
    await left_running(store_url, "going", pid=os.getpid(), process=process_identity(os.getpid()))
    assert await status_after_start(store_url, "going") == "running"


async def test_an_instance_in_another_pid_namespace_is_gone_once_it_stops_beating(store_url: str) -> None:
    elsewhere = {"hostname": socket.gethostname(), "pid": 2**22 + 7, "process": "pid:[1]/12345"}  # no such pid here
    await left_running(store_url, "beating", heartbeat_at=time.time(), **elsewhere)
    assert await status_after_start(store_url, "beating") == "running"
    # Silent for 5 s: gone when a beat is 1 s (4 beats), not when it is 30 s.
    await left_running(store_url, "silent", heartbeat_at=time.time() - 5, **elsewhere)
    assert await status_after_start(store_url, "silent", heartbeat_seconds=30) == "running"
    assert await status_after_start(store_url, "silent", heartbeat_seconds=1) == "interrupted"
