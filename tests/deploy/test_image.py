"""The container image as an operator runs it: the demo through the OpenAI SDK, Docker's health check, a user
that is not root, the worker count and the run store's URL from the environment, and a SIGTERM (`docker stop`)
during a streamed answer that lets the answer finish and the run be recorded before the process exits.

Every container runs with `--network host` and listens on 127.0.0.1 (`UVICORN_HOST`): nothing leaves loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from adapter_critic.demo import REVISED_LEAD
from adapter_critic.store import RunQuery, open_store

from ..conftest import RemoteUpstream, sdk
from ..helpers import direct_toml
from .conftest import RunContainer, docker

USER_ID = 10001  # the Dockerfile's adapter_critic user


def runs(port: int) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = httpx.get(f"http://127.0.0.1:{port}/v1/runs").json()["data"]
    return listed


def until(condition: Callable[[], bool], wait: float = 60) -> bool:
    """Whether `condition` held within `wait` seconds, asked again and again (each time a request to a server:
    the run store writes in the background)."""
    deadline = time.monotonic() + wait
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_image_serves_the_demo_healthy_as_its_own_user(image: str, run_container: RunContainer) -> None:
    port = free_port()
    container = run_container(
        "--network", "host", "--health-interval", "1s",
        "-e", "UVICORN_HOST=127.0.0.1", "-e", f"UVICORN_PORT={port}", "-e", "UVICORN_WORKERS=2",
        image,
    )  # fmt: skip
    container.until_health("healthy")

    client = sdk(OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0))
    reply = client.chat.completions.create(model="demo-critic", messages=[{"role": "user", "content": "Hello!"}])
    assert (reply.choices[0].message.content or "").startswith(REVISED_LEAD)
    assert reply.model_extra is not None and reply.model_extra["adapter_critic"]["intermediate"]["critic"]
    chunks = client.chat.completions.create(
        model="demo-direct", messages=[{"role": "user", "content": "Hello!"}], stream=True
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed.startswith("Demo model draft")

    # Both runs recorded, in the SQLite file under the image's /data volume.
    recorded = until(lambda: {run["served_model"] for run in runs(port)} == {"demo-critic", "demo-direct"})
    assert recorded, runs(port)
    assert any(mount["Destination"] == "/data" for mount in json.loads(container.inspect("{{json .Mounts}}")))

    # Not root: the image's user, and the server's processes run as it.
    assert container.inspect("{{.Config.User}}") == "adapter_critic"
    assert docker("exec", container.id, "id", "-u").strip() == str(USER_ID)
    uids = docker("exec", container.id, "sh", "-c", "grep -h '^Uid:' /proc/[0-9]*/status | sort -u")
    assert uids.split() == ["Uid:", *[str(USER_ID)] * 4], uids
    # UVICORN_WORKERS=2: a supervisor and two workers, each a server process.
    assert container.logs().count("Started server process") == 2

    # Slim: no compiler, no pip, no pip cache in the runtime image.
    tools = docker("exec", container.id, "sh", "-c", "command -v gcc cc make pip pip3; python3 -m pip 2>&1; true")
    assert tools.strip() == "/opt/adapter_critic/bin/python3: No module named pip", tools
    # (The build stage's wheelhouse and source stay behind; the base's own ensurepip wheels are the base's.)
    leftovers = "find / -xdev \\( -path '*/.cache/pip' -o -path /wheels -o -path /src \\) -print"
    assert docker("exec", "--user", "root", container.id, "sh", "-c", leftovers) == ""
    healthcheck = json.loads(docker("image", "inspect", "--format", "{{json .Config.Healthcheck}}", image))
    assert healthcheck["Test"] == ["CMD", "python3", "/opt/adapter_critic/healthcheck.py"]


def test_a_sigterm_lets_a_streamed_answer_finish(
    image: str, run_container: RunContainer, upstream_url: str, tmp_path: Path
) -> None:
    answer = "A slow answer, streamed eight characters at a time, that a stopping server still sends whole."
    RemoteUpstream(upstream_url).reset().script({"content": answer, "chunk_delay": 0.2})
    config = tmp_path / "config.toml"
    config.write_text("retries = 0\n" + direct_toml(f"{upstream_url}/v1", name="slow", model="api-model"))
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, USER_ID, USER_ID)
    port = free_port()
    container = run_container(
        "--network", "host", "--health-interval", "1s",
        "-e", "UVICORN_HOST=127.0.0.1", "-e", f"UVICORN_PORT={port}",
        "-v", f"{config}:/config/config.toml:ro", "-e", "ADAPTER_CRITIC_CONFIG=/config/config.toml",
        "-v", f"{data}:/runs", "-e", "ADAPTER_CRITIC_STORE=sqlite:////runs/runs.sqlite3",
        image,
    )  # fmt: skip
    container.until_health("healthy")

    client = sdk(OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0))
    stream = client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "Hello"}], stream=True)
    chunks = iter(stream)
    received = ""
    while not received:  # the answer has begun: the request is in flight
        chunk = next(chunks)
        received += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    docker("kill", "--signal", "TERM", container.id)
    finish = None
    for chunk in chunks:
        if chunk.choices:
            received += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert received == answer
    assert finish == "stop"

    assert docker("wait", container.id).strip() == "0"  # it exited, cleanly
    logs = container.logs()
    assert "Shutting down" in logs and "Finished server process" in logs
    runs = asyncio.run(_runs(f"sqlite:///{data / 'runs.sqlite3'}"))
    assert [(run.served_model, run.status) for run in runs] == [("slow", "ok")]


async def _runs(url: str) -> list[object]:
    store = await open_store(url)
    async with store:
        return list((await store.list_runs(RunQuery())).data)
