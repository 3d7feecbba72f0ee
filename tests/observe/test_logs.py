"""Logs a person can use: one INFO line per request with its request id, stages, tokens, retries and status;
the request id on every warning of its run; a start-up line naming what is served (never keys); JSON lines."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import httpx
import pytest

from adapter_critic.demo import demo_config
from adapter_critic.observe.logs import JsonFormatter

from ..conftest import AppFactory, chat, make_config, run_server, stop_server
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio


def run_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "adapter_critic" and hasattr(r, "run")]


async def test_one_info_line_per_request(
    serve: AppFactory, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    upstream.script(Reply("draft"), Reply(status=503, body="{}"), Reply("critique"), Reply("revised"))
    async with serve(make_config(retries=1, retry_backoff_seconds=0)) as client:
        response = await client.post("/chat/completions", json=chat("m-critic"))
    [record] = run_records(caplog)
    assert record.levelno == logging.INFO
    run = record.run  # type: ignore[attr-defined]
    assert run["request_id"] == response.json()["id"]
    assert (run["served_model"], run["mode"], run["status"], run["retries"]) == ("m-critic", "critic", "ok", 1)
    assert list(run["stages"]) == ["api_draft", "critic", "api_final"]
    assert run["tokens"] == {"prompt": 3, "completion": 6}
    message = record.getMessage()
    assert message.startswith(f"[{run['request_id']}] m-critic (critic) ok in ")
    assert "stages: api_draft " in message and "tokens: 3 in, 6 out" in message and "retries: 1" in message


async def test_warnings_of_a_run_carry_its_request_id(
    serve: AppFactory, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    upstream.script(Reply("draft"), Reply(status=500, body="{}"))
    async with serve() as client:
        response = await client.post("/chat/completions", json=chat("m-critic"))
    request_id = response.json()["id"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(f"[{request_id}] critic stage failed, answering with the draft")
    [record] = run_records(caplog)
    assert record.run["status"] == "degraded" and record.run["degraded"] is True  # type: ignore[attr-defined]


async def test_adapter_rejections_are_logged_at_info(
    serve: AppFactory, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    upstream.script(Reply("draft"), Reply("no blocks here"))
    async with serve() as client:
        await client.post("/chat/completions", json=chat("m-adapter"))
    assert any(r.levelno == logging.INFO and "adapter reply 1 rejected" in r.getMessage() for r in caplog.records)


def test_the_json_formatter_writes_one_object_with_the_run_fields() -> None:
    run = {"request_id": "chatcmpl-1", "served_model": "m", "mode": "direct", "status": "ok", "retries": 0}
    record = logging.LogRecord("adapter_critic", logging.INFO, __file__, 1, "a line", None, None)
    record.run = run
    record.request_id = "chatcmpl-1"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "a line" and line["level"] == "INFO" and line["logger"] == "adapter_critic"
    assert {key: line[key] for key in run} == run
    assert line["time"].endswith("Z")


@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_the_standalone_server_logs_its_models_and_each_request(log_format: str) -> None:
    env = {"ADAPTER_CRITIC_LOG_FORMAT": log_format, "OPENAI_API_KEY": "sk-never-logged-1234567890"}
    env = {key: value for key, value in {**os.environ, **env}.items() if key != "ADAPTER_CRITIC_CONFIG"}
    with run_server(["-m", "uvicorn", "adapter_critic.asgi:app", "--log-level", "info"], env) as (url, proc):
        body = chat("demo-critic")
        # The socket already listens: the request waits for the server to accept it.
        answered = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=20).json()
        err = stop_server(proc)
    serving = f"serving {len(demo_config().served_models)} model(s)"
    lines = [line for line in err.splitlines() if serving in line or "demo-critic (critic)" in line]
    assert len(lines) == 2, err
    assert "sk-never-logged" not in err
    if log_format == "json":
        started, request = (json.loads(line) for line in lines)
        assert request["request_id"] == answered["id"] and request["status"] == "ok"
        assert list(request["stages"]) == ["api_draft", "critic", "api_final"]
        assert "demo-direct (direct → in-process /demo/v1)" in started["message"]
    else:
        assert "demo-direct (direct → in-process /demo/v1)" in lines[0]
        assert lines[1].startswith(f"INFO:     [{answered['id']}] demo-critic (critic) ok in ")


def test_logging_config_example_loads() -> None:
    code = (
        "import json, logging.config; "
        "logging.config.dictConfig(json.load(open('examples/logging/log_config.json'))); "
        "import logging; logging.getLogger('adapter_critic').info('hello')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    assert json.loads(result.stderr.strip().splitlines()[-1])["message"] == "hello"
