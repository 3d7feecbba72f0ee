"""A client that goes away before its answer is an ordinary disconnect (issue 19): the request's run is cancelled
and the log gets one INFO line with the request id, never a traceback.

In-process, the app is driven with our own receive/send: a client that disconnects while a plain request's
upstream call runs, and a server whose `send` raises because the connection is closed. End to end, a raw socket
sends a request and shuts down its sending side at once (a half-close) to a real uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import openai
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp, Message

from adapter_critic import create_app
from adapter_critic.http import disconnect as _disconnect

from ..conftest import RemoteUpstream, chat, make_config, run_server, sdk, stop_server
from ..helpers import raw_post, served_toml
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

GONE = re.compile(r"\[(chatcmpl-[0-9a-f]+)\] the client went away")


@contextlib.asynccontextmanager
async def app_on(upstream: ScriptedUpstream) -> AsyncIterator[ASGIApp]:
    """The app (routes at the root), its upstream calls going to `upstream` over httpx."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(make_config(), http_client=upstream_client)
        async with LifespanManager(app) as manager:
            yield manager.app


def gone_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if GONE.search(r.getMessage())]


def no_errors(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


@pytest.mark.parametrize("on_asyncio", [True, False], ids=["bare-asyncio-task", "anyio-task-group"])
async def test_cancel_on_disconnect(
    on_asyncio: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_disconnect, "on_asyncio", lambda: on_asyncio)
    caplog.set_level(logging.INFO, logger="adapter_critic")
    disconnect = anyio.Event()

    async def receive() -> Message:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def quick() -> str:
        await anyio.lowlevel.checkpoint()
        return "answer"

    async def endless() -> str:
        disconnect.set()  # the client leaves while the work runs
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(5):  # a hang guard
        assert await _disconnect.cancel_on_disconnect(receive, "chatcmpl-1", quick) == "answer"
        assert await _disconnect.cancel_on_disconnect(receive, "chatcmpl-2", endless) is None
    assert gone_records(caplog) == ["[chatcmpl-2] the client went away; the request is cancelled"]


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_disconnect() -> None:
    started = asyncio.Event()

    async def receive() -> Message:
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def endless() -> str:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    watched = asyncio.create_task(_disconnect.cancel_on_disconnect(receive, "chatcmpl-1", endless))
    await started.wait()
    watched.cancel()  # the server cancels the request (a shutdown), not the watcher
    with pytest.raises(asyncio.CancelledError):
        await watched


@pytest.mark.parametrize("swallowed", [False, True], ids=["work-cancelled", "work-ends-anyway"])
async def test_after_a_disconnect_the_request_task_has_no_cancellation_left(
    swallowed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_disconnect, "WATCH_AFTER_SECONDS", 0)  # watch at once
    gone = asyncio.Event()

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def work() -> str:
        gone.set()  # the client leaves while the work runs
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if not swallowed:
                raise
        return "answer"

    async def request() -> tuple[str | None, int]:
        result = await _disconnect.cancel_on_disconnect(receive, "chatcmpl-1", work)
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling()

    assert await asyncio.create_task(request()) == (None, 0)


@pytest.mark.parametrize(
    ("served", "replies", "aborted_model"),
    [
        ("m-direct", [Reply(delay=30)], "api-model"),
        (
            "m-critic",
            [Reply(content="draft", model="api-model"), Reply(content="critique", model="critic-model", delay=30)],
            "critic-model",
        ),
    ],
    ids=["direct", "critic-stage-running"],
)
async def test_client_disconnect_cancels_a_plain_request(
    served: str, replies: list[Reply], aborted_model: str, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    upstream.script(*replies)
    holding, aborted, disconnect = upstream.holding_signal(), upstream.aborted_signal(), anyio.Event()
    sent: list[Message] = []

    async def receive() -> Message:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async with app_on(upstream) as app, anyio.create_task_group() as tg:
        tg.start_soon(raw_post, app, chat(served), receive, send)
        with anyio.fail_after(5):  # a hang guard
            await holding.wait()  # the slow upstream call is running
            disconnect.set()
            await aborted.wait()  # ... and is cancelled; raw_post() returns, and with it the task group

    assert [call.model for call in upstream.aborted] == [aborted_model]
    assert [call.model for call in upstream.calls][-1] == aborted_model  # no later stage was started
    assert sent == []
    assert len(gone_records(caplog)) == 1
    no_errors(caplog)


CLOSED_CONNECTION_ERRORS = [
    # uvloop's transport once the connection is closed, from a server that writes without checking first
    RuntimeError(
        "unable to perform operation on <TCPTransport closed=True reading=False 0x7f00c0ffee00>; the handler is closed"
    ),
    ConnectionResetError("Connection lost"),  # ASGI 2.4: `send` on a closed connection raises an OSError
]


@pytest.mark.parametrize("error", CLOSED_CONNECTION_ERRORS, ids=["closed-uvloop-transport", "oserror"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("served", ["m-direct", "m-critic"])
async def test_send_on_a_closed_connection_is_a_disconnect(
    served: str, stream: bool, error: Exception, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    attempts: list[str] = []

    async def receive() -> Message:  # the server has not noticed yet: only `send` finds the connection closed
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        attempts.append(message["type"])
        raise error

    async with app_on(upstream) as app:
        await raw_post(app, chat(served, stream=stream), receive, send)

    assert attempts == ["http.response.start"]  # nothing more was tried once the client was known to be gone
    assert len(gone_records(caplog)) == 1
    no_errors(caplog)


# -- end to end: a half-closed connection to a real uvicorn -------------------------------------------------------

LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn": {"level": "INFO"}, "adapter_critic": {"level": "INFO"}},
    "root": {"level": "WARNING", "handlers": ["stderr"]},
}


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
retries = 0

{served_toml(up, "hc", ("direct", "critic"))}"""


def half_close(url: str, body: dict[str, Any]) -> None:
    """POST `body` on a raw socket, shut down the sending side right after it, then read until the server closes
    the connection."""
    raw = json.dumps(body).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(raw)}\r\n\r\n"
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + raw)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass


def test_half_closed_connections_are_ordinary_disconnects(upstream_url: str, tmp_path: Path) -> None:
    (tmp_path / "log.json").write_text(json.dumps(LOG_CONFIG))
    (tmp_path / "config.toml").write_text(config_toml(upstream_url))
    up = RemoteUpstream(upstream_url).reset()
    args = ["-m", "uvicorn", "adapter_critic.asgi:app", "--log-config", str(tmp_path / "log.json")]
    with run_server(args, env={"ADAPTER_CRITIC_CONFIG": str(tmp_path / "config.toml")}) as (url, proc):
        for served in ("hc-direct", "hc-critic"):
            for stream in (False, True):
                up.reset()
                # The upstream would take a minute: the request is still running when the half-close arrives.
                up.script(*[{"delay": 60}] * 6)
                half_close(url, chat(served, stream=stream))
        up.reset()
        answer = httpx.post(f"{url}/v1/chat/completions", json=chat("hc-critic"), timeout=30)
        assert answer.status_code == 200, answer.text  # the server keeps serving
        # A client that read the whole stream and then closes its connection did not go away early.
        client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        for served in ("hc-direct", "hc-critic"):
            up.reset()
            stream = client.chat.completions.create(**chat(served), stream=True)
            assert [c for c in stream if c.choices and c.choices[0].finish_reason]
            stream.close()
        # The server first lets every request finish: one still running, not cancelled, keeps it from stopping.
        log = stop_server(proc)

    assert "Traceback" not in log, log
    assert "Exception in ASGI application" not in log, log
    assert "failed unexpectedly" not in log, log
    gone = GONE.findall(log)
    assert len(gone) == len(set(gone)) == 4, log  # one line per request, with its id
