"""The eval runner's bounded concurrency, on the scripted upstream in-process behind a gate that holds requests."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from adapter_critic.evals.dataset import Item
from adapter_critic.evals.endpoint import Endpoint, Reply
from adapter_critic.evals.results import Result
from adapter_critic.evals.runner import jobs, run_jobs, run_one
from adapter_critic.evals.scorers import make_scorer
from adapter_critic.redact import Secrets
from adapter_critic.upstream.client import Upstream
from adapter_critic.upstream.retry import RetryPolicy

from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio


class Gate:
    """ASGI: counts the requests in flight and holds each until `release` is set."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.in_flight = self.most = 0
        self.release = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def test_no_more_requests_at_once_than_the_concurrency() -> None:
    gate = Gate(ScriptedUpstream().app)
    upstream = Upstream(timeout=30, secrets=Secrets([]), in_process_app=gate)
    upstream.open()
    endpoint = Endpoint(upstream, "/v1", RetryPolicy(retries=0), name="scripted")
    items = [Item(id=f"q{i}", line=i, messages=[{"role": "user", "content": f"p{i}"}]) for i in range(5)]
    scorer = make_scorer("regex:echo", judge=None)  # type: ignore[arg-type]
    results: list[Result] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: run_jobs(endpoint, jobs(items, ["m"], set()), lambda _: scorer, results.append, concurrency=2)
            )
            with anyio.fail_after(10):
                while gate.in_flight < 2:
                    await anyio.wait_all_tasks_blocked()
            await anyio.wait_all_tasks_blocked()  # every worker is waiting: a third request would be here by now
            assert gate.in_flight == 2
            gate.release.set()
    finally:
        await upstream.aclose()
    assert gate.most == 2
    assert sorted(result.id for result in results) == [f"q{i}" for i in range(5)]
    assert all(result.score == 1.0 for result in results)


class Replies:
    """An endpoint that answers every request with `body`, after `latency_ms`."""

    def __init__(self, body: dict[str, Any], latency_ms: float) -> None:
        self.reply = Reply(body, latency_ms)

    async def chat(self, body: dict[str, Any]) -> Reply:
        return self.reply


def _completion(extension: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "Paris"}
    return {"choices": [{"message": message}], "adapter_critic": extension}


async def test_a_cached_answer_keeps_the_time_its_run_took() -> None:
    """A hit answers in a millisecond; what a technique costs in time is what the run that made the answer took."""
    scorer = make_scorer("contains", judge=None)  # type: ignore[arg-type]
    item = Item(id="q", line=1, messages=[{"role": "user", "content": "Capital of France?"}], expected=["Paris"])
    timings = {"api": 812.5, "total": 812.9}
    hit = Replies(_completion({"run_id": "r2", "timings_ms": timings, "cache": {"hit": True, "run_id": "r1"}}), 1.2)
    miss = Replies(_completion({"run_id": "r3", "timings_ms": timings}), 815.0)
    cached = await run_one(cast(Endpoint, hit), item, "m", scorer)
    fresh = await run_one(cast(Endpoint, miss), item, "m", scorer)
    assert (cached.cached_from, cached.latency_ms) == ("r1", 812.9)
    assert (fresh.cached_from, fresh.latency_ms) == (None, 815.0)
