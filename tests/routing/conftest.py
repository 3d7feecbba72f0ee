"""Fixtures of the routing tests: the scripted upstream as a real server, the app under real uvicorn, polling the
runs API for what is written after a response (a shadow evaluation)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapter_critic.config import Config
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import RemoteUpstream
from ..limits.conftest import uvicorn_serving

DEMO = {"model": "adapter-critic-demo-model", "base_url": "/demo/v1"}
DEMO_MODEL = DEMO["model"]


@pytest.fixture(scope="module")
def remote(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url)


@contextlib.contextmanager
def serving(config: dict[str, Any], store: Path | None) -> Iterator[str]:
    """The standalone app of `config` (recording to the SQLite file `store`) under real uvicorn; its base URL."""
    given = {"retries": 0, **config}
    if store is not None:
        given["store"] = {"url": f"sqlite:///{store}"}
    service = compose(Config.from_dict(given), standalone=True, in_process_app=_demo())
    with uvicorn_serving(build_app(service, prefix="/v1")) as url:
        yield url


def _demo() -> Any:
    from adapter_critic.demo import demo_model_app

    return demo_model_app()


def run_detail(url: str, run_id: str, *, until: str | None = None, headers: dict[str, str] | None = None) -> Any:
    """`GET /v1/runs/{run_id}` once it is written (and, with `until`, once that field is not empty)."""
    deadline = time.monotonic() + 60  # a bound on waiting, not a measurement
    while time.monotonic() < deadline:
        answer = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers, timeout=30)
        if answer.status_code == 200 and answer.json()["status"] != "running":
            body = answer.json()
            if until is None or body.get(until):
                return body
    raise AssertionError(f"run {run_id} not written with {until or 'its end'}")


def metric(url: str, name: str, key: str | None = None, **labels: str) -> float:
    """The value of one series of `GET /metrics` (0 when it is not there); `key`: the bearer token it needs."""
    answer = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {key}"} if key else None)
    assert answer.status_code == 200, answer.text
    text = answer.text
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{"):
            series, _, value = line.rpartition(" ")
            given = series[len(name) + 1 : -1].split(",")
            if ",".join(sorted(given)) == wanted:
                return float(value)
    return 0.0
