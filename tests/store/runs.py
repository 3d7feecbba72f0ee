"""Runs for the store tests, recorded the way the server records them: a run's events handed to a `RunRecorder`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec

from adapter_critic import create_app
from adapter_critic.core import Answer, Usage
from adapter_critic.errors import APIError, UpstreamError
from adapter_critic.events import Attempt, Noted, RunFinished, RunRecord, RunStarted, StageFinished, StageStarted
from adapter_critic.pricing import CallCost
from adapter_critic.request.decode import decode_request
from adapter_critic.store.recorder import RunOpened, RunRecorder
from adapter_critic.store.runstore import RunStore

from ..conftest import asgi_client, make_config
from ..scripted_upstream import ScriptedUpstream

TARGET = "api-model@http://upstream.test/v1"


@contextlib.asynccontextmanager
async def recording(
    upstream: ScriptedUpstream, url: str, **store: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, RunStore]]:
    """The app recording to `url`, its upstream calls going to `upstream`; yields a client and the store."""
    top = store.pop("top", {})
    config = make_config(store={"url": url, **store}, **top)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(config, http_client=upstream_client)
        store_ = app.state.adapter_critic.store
        assert store_ is not None
        async with asgi_client(app) as client:
            yield client, store_


def request(content: str = "Hello", **fields: Any) -> Any:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **fields}
    return decode_request(msgspec.json.encode(body))


def record_run(
    store: RunStore,
    run_id: str,
    *,
    served_model: str = "m-direct",
    mode: str = "direct",
    status: str = "ok",
    stages: tuple[str, ...] = ("api",),
    request_id: str | None = None,
    content: str = "Hello",
    answer: str = "Hi!",
    finish: bool = True,
    capture: str = "full",
    error: APIError | None = None,
    stage_error: UpstreamError | None = None,
    started_at: float | None = None,
    costs: tuple[float | None, ...] | None = None,
) -> Callable[[], None]:
    """Publish a run's events to a recorder on `store` (stages answering `answer`, or failing with `stage_error`);
    `finish=False` leaves it running, and the function returned ends it. `costs`: each stage's cost in EUR (None:
    unknown), as a server with prices reports them."""

    def enqueue(record: Any) -> None:
        if started_at is not None and isinstance(record, RunOpened):
            record.started_at = started_at
        store.enqueue(record)

    recorder = RunRecorder(enqueue, request_id or run_id, request(content), capture)  # type: ignore[arg-type]
    record = RunRecord(run_id, served_model, mode)
    if costs is not None:
        record.currency = "EUR"
    events: list[Any] = [RunStarted(run_id, served_model, mode, False)]
    for index, stage in enumerate(stages):
        messages = [{"role": "user", "content": content}]
        usage = Usage(1, 2, 3)
        failed = stage_error if stage == stages[-1] else None
        attempts = (Attempt(TARGET, failed),)
        output = None if failed else answer
        events += [
            StageStarted(stage, TARGET, messages),
            StageFinished(stage, TARGET, attempts, usage, 5.0, output, failed, cost=cost(costs, index)),
        ]
        if failed is None:
            events.append(Noted(stage, answer))
    for event in events:
        record.apply(event)
        recorder(event)

    def end() -> None:
        record.answer = Answer(answer, None, "stop")
        finished = RunFinished(status, record, error)  # type: ignore[arg-type]
        record.apply(finished)
        recorder(finished)

    if finish:
        end()
    return end


def cost(costs: tuple[float | None, ...] | None, index: int) -> CallCost | None:
    return None if costs is None else CallCost("EUR", costs[index])
