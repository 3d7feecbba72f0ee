"""The guards through a real `uvicorn adapter_critic.asgi:app` and the official `openai` SDK: a gzip bomb from the
upstream stops at the limit, the upstream is asked for gzip or identity only, `"*"` does not reach this
machine, and a request beyond the overload queue is refused at once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import openai
import pytest

from ..conftest import run_app
from ..helpers import direct_toml
from ..upstream.test_encoding import LIMIT, RawUpstream, nested_gzip_bomb

pytestmark = pytest.mark.anyio


def bomb(streamed: bool) -> tuple[dict[str, str], bytes]:
    return {"content-type": "application/json", "content-encoding": "gzip, gzip"}, nested_gzip_bomb()


@contextlib.asynccontextmanager
async def standalone(tmp_path: Path, upstream: RawUpstream, settings: str = "") -> AsyncIterator[openai.AsyncOpenAI]:
    """The standalone server in front of a loopback `upstream`; an SDK client for it."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    upstream_url = f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}/v1"
    config = f"""
retries = 0
max_upstream_response_bytes = {LIMIT}
allowed_override_base_urls = ["*"]
{settings}
{direct_toml(upstream_url, model="api-model")}"""
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, upstream.handle)
        with run_app(tmp_path / "config.toml", config) as (url, _):
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
                yield client
        tg.cancel_scope.cancel()


MESSAGES: list[Any] = [{"role": "user", "content": "Hello"}]


async def test_guards_through_the_standalone_server(tmp_path: Path) -> None:
    upstream = RawUpstream(bomb)
    async with standalone(tmp_path, upstream) as client:
        with pytest.raises(openai.APIStatusError) as bombed:
            await client.chat.completions.create(model="m", messages=MESSAGES)
        for url in ("http://127.0.0.1:9/v1", "http://[::ffff:169.254.169.254]/v1", "http://localhost/v1"):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(
                    model="m", messages=MESSAGES, extra_body={"x_adapter_critic": {"api_base_url": url}}
                )
            assert refused.value.body["param"] == "x_adapter_critic.api_base_url"  # type: ignore[index]
            assert 'allowed_override_base_urls = ["*"] does not cover' in refused.value.message
    assert bombed.value.status_code == 502
    assert f"larger than {LIMIT} bytes (max_upstream_response_bytes)" in bombed.value.message
    assert [head["accept-encoding"] for head in upstream.heads] == ["gzip, identity"]  # the refused never called


class HeldUpstream(RawUpstream):
    """Answers a plain completion, but only once `release` is set; `arrived` is set by the first call."""

    def __init__(self) -> None:
        super().__init__(lambda streamed: ({"content-type": "application/json"}, COMPLETION))
        self.arrived = anyio.Event()
        self.release = anyio.Event()

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        self.arrived.set()
        await self.release.wait()
        await super().handle(stream)


COMPLETION = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "api-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
).encode()


async def test_a_request_beyond_the_queue_is_refused_at_once_through_the_standalone_server(tmp_path: Path) -> None:
    """One slot, one place in the queue, a queue timeout of a minute: of two more requests, one waits and the
    other is refused at once (which one depends on arrival order)."""
    upstream = HeldUpstream()
    settings = "max_concurrent_requests = 1\nmax_queued_requests = 1\nqueue_timeout_seconds = 60\n"
    outcomes: list[Any] = []
    refused = anyio.Event()
    async with standalone(tmp_path, upstream, settings) as client, anyio.create_task_group() as tg:

        async def ask() -> None:
            try:
                outcomes.append(await client.chat.completions.create(model="m", messages=MESSAGES))
            except openai.APIStatusError as exc:
                outcomes.append(exc)
                refused.set()

        tg.start_soon(ask)
        with anyio.fail_after(30):
            await upstream.arrived.wait()  # the first request holds the only slot
        tg.start_soon(ask)
        tg.start_soon(ask)
        try:
            with anyio.fail_after(30):  # within the queue's minute: only its length can refuse a request
                await refused.wait()
        finally:
            upstream.release.set()
    errors = [o for o in outcomes if isinstance(o, openai.APIStatusError)]
    assert len(outcomes) == 3 and len(errors) == 1
    assert errors[0].status_code == 503 and errors[0].response.headers["retry-after"] == "60"
    assert "max_queued_requests" in errors[0].message
    assert all(o.choices[0].message.content == "ok" for o in outcomes if o not in errors)
