"""The eval runner's bounded concurrency, on the scripted upstream in-process behind a gate that holds requests."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from adapter_critic.evals.dataset import Item
from adapter_critic.evals.endpoint import Endpoint
from adapter_critic.evals.results import Result
from adapter_critic.evals.runner import jobs, run_jobs
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
