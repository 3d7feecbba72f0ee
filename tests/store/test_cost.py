"""What runs cost, in the run store (schema version 5) on SQLite and PostgreSQL: each run's currency, total, known part
and unknown stages, each stage call's cost, the `min_cost` filter of the runs API and `RunStore.list_runs`, and a
version 4 store upgraded in place."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine

from adapter_critic.store import RunQuery, open_store
from adapter_critic.store.database import engine_url
from adapter_critic.store.schema import VERSION

from ..conftest import chat
from ..helpers import usage
from ..scripted_upstream import Reply, ScriptedUpstream
from .runs import record_run, recording

pytestmark = pytest.mark.anyio

# api-model at 2 and 8 per million tokens; critic-model has no price. Each call below reports 1000 in, 100 out.
PRICES = {"pricing": {"currency": "EUR"}, "prices": {"api-model": {"input": 2, "output": 8}}}
API_CALL = (1000 * 2 + 100 * 8) / 1e6
USAGE = usage(1000, 100)


async def test_each_runs_cost_is_stored_listed_and_filtered(upstream: ScriptedUpstream, store_url: str) -> None:
    upstream.script(*[Reply(usage=USAGE) for _ in range(4)])
    async with recording(upstream, store_url, top=PRICES) as (client, store):
        direct = (await client.post("/chat/completions", json=chat("m-direct"))).headers["x-request-id"]
        critic = (await client.post("/chat/completions", json=chat("m-critic"))).headers["x-request-id"]
        await store.flush()
        listed = {run["id"]: run["cost"] for run in (await client.get("/runs")).json()["data"]}
        detail = (await client.get(f"/runs/{critic}")).json()
        over = {}
        for min_cost in ("0", "0.0028", "0.003", "0.006"):
            page = (await client.get("/runs", params={"min_cost": min_cost})).json()
            over[min_cost] = [run["id"] for run in page["data"]]
        by_store = [run.id for run in (await store.list_runs(RunQuery(min_cost=API_CALL * 1.5))).data]
    known = pytest.approx(API_CALL)
    assert listed[direct] == {"currency": "EUR", "total": known, "total_known": known, "unknown_stages": []}
    # The critic's reviewer has no price: the total is unknown, the two API calls' cost is kept.
    assert listed[critic] == {
        "currency": "EUR", "total": None, "total_known": pytest.approx(2 * API_CALL), "unknown_stages": ["critic"]
    }  # fmt: skip
    assert [stage["cost"] for stage in detail["stages"]] == [
        {"currency": "EUR", "amount": pytest.approx(API_CALL)},
        {"currency": "EUR", "amount": None},
        {"currency": "EUR", "amount": pytest.approx(API_CALL)},
    ]
    # min_cost compares the known part (at least): the critic run is over 0.003 on its API calls alone, though its
    # total is unknown.
    assert API_CALL == 0.0028
    assert over == {"0": [critic, direct], "0.0028": [critic, direct], "0.003": [critic], "0.006": []}
    assert by_store == [critic]


async def test_stages_written_before_their_run_ends_keep_their_cost(store_url: str) -> None:
    async with await open_store(store_url) as store:
        end = record_run(store, "long", stages=("api_draft", "critic"), finish=False, costs=(0.25, None))
        await store.flush()  # its stages are rows of `stages`: the run goes on past the batch
        running = await store.get_run("long")
        end()
        record_run(store, "cheap", costs=(0.125,))
        record_run(store, "unpriced")  # a server without prices
        await store.flush()
        long_run = await store.get_run("long")
        costly = [run.id for run in (await store.list_runs(RunQuery(min_cost=0.2))).data]
        any_cost = [run.id for run in (await store.list_runs(RunQuery(min_cost=0))).data]
        unpriced = await store.get_run("unpriced")
    assert running is not None and running.cost is None  # not known until the run ends
    assert long_run is not None and long_run.cost is not None
    assert (long_run.cost.total, long_run.cost.total_known, long_run.cost.unknown_stages) == (None, 0.25, ["critic"])
    assert [(s.cost.currency, s.cost.amount) for s in long_run.stages if s.cost] == [("EUR", 0.25), ("EUR", None)]
    assert costly == ["long"]
    assert any_cost == ["cheap", "long"]  # a run of a server without prices has no cost to compare
    assert unpriced is not None and unpriced.cost is None and all(s.cost is None for s in unpriced.stages)


async def test_a_version_4_store_is_upgraded_and_keeps_costs_from_then_on(store_url: str) -> None:
    async with await open_store(store_url) as store:
        record_run(store, "before")
        await store.flush()
    await _execute(
        store_url,
        *(f"ALTER TABLE runs DROP COLUMN {c}" for c in ("cost_currency", "cost_total", "cost_known", "cost_unknown")),
        "ALTER TABLE stages DROP COLUMN cost",
        "ALTER TABLE stages DROP COLUMN cost_currency",
        "UPDATE schema_version SET version = 4",
    )
    async with await open_store(store_url) as store:
        before = await store.get_run("before")
        record_run(store, "after", costs=(0.5,))
        await store.flush()
        after = await store.get_run("after")
        over = [run.id for run in (await store.list_runs(RunQuery(min_cost=0.1))).data]
    assert before is not None and before.cost is None and before.stages[0].cost is None
    assert after is not None and after.cost is not None and after.cost.total == 0.5
    assert over == ["after"]
    [version] = await _execute(store_url, "SELECT version FROM schema_version")
    assert version == VERSION  # and every later step


async def _execute(url: str, *statements: str) -> list[Any]:
    """Run `statements` in one transaction; the first column of the last one's rows."""
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.begin() as conn:
            for statement in statements:
                result = await conn.execute(sqlalchemy.text(statement))
            return list(result.scalars().all()) if result.returns_rows else []
    finally:
        await engine.dispose()
