"""The run's events: what a subscriber sees, in order, for plain, streamed, degraded, failed and abandoned
runs — the interface the response extension (and every later view of a run) is built on."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager

from adapter_critic.events import (
    AnswerChunks,
    Event,
    Noted,
    RunFinished,
    RunStarted,
    StageFinished,
    StageStarted,
)
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import asgi_client, chat, make_config
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def observed(upstream: ScriptedUpstream, **config: Any) -> AsyncIterator[tuple[httpx.AsyncClient, list[Event]]]:
    """The app with a subscriber recording every event; yields (client, events)."""
    events: list[Event] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        service = compose(make_config(**config), http_client=network, subscribers=(events.append,))
        async with asgi_client(build_app(service)) as client:
            yield client, events


def kinds(events: list[Event]) -> list[str]:
    """Each event as `Kind` or `Kind:stage/key/status`, skipping the streamed answer chunks."""
    named = []
    for event in events:
        if isinstance(event, StageStarted | StageFinished):
            named.append(f"{type(event).__name__}:{event.stage}")
        elif isinstance(event, Noted):
            named.append(f"Noted:{event.key}")
        elif isinstance(event, RunFinished):
            named.append(f"RunFinished:{event.status}")
        elif not isinstance(event, AnswerChunks):
            named.append(type(event).__name__)
    return named


async def test_a_critic_run_reports_each_stage_in_order(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("draft"), Reply("critique"), Reply("revised"))
    async with observed(upstream) as (client, events):
        response = await client.post("/chat/completions", json=chat("m-critic"))
    assert response.status_code == 200
    assert kinds(events) == [
        "RunStarted",
        "StageStarted:api_draft",
        "StageFinished:api_draft",
        "Noted:api_draft",
        "StageStarted:critic",
        "StageFinished:critic",
        "Noted:critic",
        "StageStarted:api_final",
        "StageFinished:api_final",
        "Noted:final",
        "RunFinished:ok",
    ]
    started = events[0]
    assert isinstance(started, RunStarted)
    assert (started.served_model, started.mode, started.stream) == ("m-critic", "critic", False)
    critic = next(e for e in events if isinstance(e, StageFinished) and e.stage == "critic")
    assert critic.target == "critic-model@http://upstream.test/v1"
    assert critic.output == "critique" and critic.error is None and len(critic.attempts) == 1
    # The extension the client got is the record the events folded into.
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    extension = response.json()["adapter_critic"]
    assert extension["intermediate"] == finished.record.intermediate
    assert list(extension["tokens"]["stages"]) == list(finished.record.stages)


async def test_a_streamed_run_reports_its_answer_chunks(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("It is in Paris."))
    async with observed(upstream) as (client, events):
        response = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert response.status_code == 200
    chunks = [e for e in events if isinstance(e, AnswerChunks)]
    assert chunks and all(c.stage == "api" for c in chunks)
    assert chunks[-1].finish is not None  # the finish chunk, kept for the tail
    assert kinds(events)[-2:] == ["Noted:api", "RunFinished:ok"]


async def test_a_degraded_run_reports_the_failed_stage_and_its_error(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("draft"), Reply(status=500, body='{"error": {"message": "down"}}'))
    async with observed(upstream) as (client, events):
        response = await client.post("/chat/completions", json=chat("m-critic"))
    assert response.json()["adapter_critic"]["degraded"] is True
    failed = next(e for e in events if isinstance(e, StageFinished) and e.stage == "critic")
    assert failed.error is not None
    assert (failed.error.kind, failed.error.upstream_status, failed.error.stage) == ("status", 500, "critic")
    assert kinds(events)[-3:] == ["Noted:critic_error", "Noted:final", "RunFinished:degraded"]


async def test_a_failed_run_finishes_with_its_error(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=503, body='{"error": {"message": "overloaded"}}'))
    async with observed(upstream) as (client, events):
        response = await client.post("/chat/completions", json=chat("m-direct"))
    assert response.status_code == 502
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "error"
    assert finished.error is not None and finished.error.status_code == 502


async def test_an_abandoned_stream_finishes_cancelled(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("slow", delay=30))
    events: list[Event] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        service = compose(make_config(keepalive_seconds=0.05), http_client=network, subscribers=(events.append,))
        app = build_app(service)
        disconnect = anyio.Event()
        body = [httpx.Request("POST", "/", json=chat("m-direct", stream=True)).read()]

        async def receive() -> dict[str, Any]:
            if body:
                return {"type": "http.request", "body": body.pop()}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            disconnect.set()  # the client leaves as soon as the first thing (a keep-alive) arrives

        scope = {"type": "http", "method": "POST", "path": "/chat/completions", "headers": [], "query_string": b""}
        async with LifespanManager(app) as manager:
            with anyio.fail_after(5):
                await manager.app(scope, receive, send)  # type: ignore[arg-type]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "cancelled"
    assert [call.model for call in upstream.aborted] == ["api-model"]


@pytest.mark.parametrize("model", ["m-direct", "m-adapter", "m-critic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_finished_run_leaves_no_garbage_cycle(upstream: ScriptedUpstream, model: str, stream: bool) -> None:
    """A run whose parts refer to each other in a cycle lives until the collector finds it: with every request
    leaving one, collections took milliseconds and the latency's tail showed them."""
    upstream.script(Reply("draft"), Reply("lgtm" if model == "m-adapter" else "critique"), Reply("revised"))
    async with observed(upstream) as (client, events):
        gc.collect()
        gc.disable()
        try:
            response = await client.post("/chat/completions", json=chat(model, stream=stream))
            assert response.status_code == 200
            assert isinstance(events[-1], RunFinished)
            events.clear()  # the subscriber's own references
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = {type(thing).__name__ for thing in gc.garbage} & {"Run", "RunRecord", "StageCalls", "ChatRequest"}
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert left == set()
