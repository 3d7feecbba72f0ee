"""Limits kept in a real, throw-away Redis (`[limits] url`): two server processes enforce one limit, and a Redis
that goes down mid-run is the configured failure (`limits.on_error`), never a 500."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from adapter_critic.config import Config
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import run_app, sdk
from .conftest import uvicorn_serving
from .redisserver import RedisServer

KEY = "sk-shared-team"
UVICORN = ["-m", "uvicorn", "adapter_critic.asgi:app", "--log-level", "warning"]
MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]


def config_toml(upstream_url: str, redis_url: str, on_error: str = "open") -> str:
    return f"""
retries = 0
default_api_key_env = "QUOTA_UP_KEY"

[served_models.m-direct]
mode = "direct"
api = {{ model = "api-model", base_url = "{upstream_url}/v1" }}

[[auth.keys]]
name = "team"
key_env = "QUOTA_TEAM_KEY"
limits = {{ requests_per_minute = 2 }}

[limits]
url = "{redis_url}"
on_error = "{on_error}"
window_seconds = 3600  # one window for the whole test
"""


@pytest.fixture
def two_servers(upstream_url: str, redis_url: RedisServer, tmp_path: Path) -> Iterator[tuple[str, str]]:
    path, toml = tmp_path / "limits.toml", config_toml(upstream_url, redis_url.url)
    env = {"QUOTA_TEAM_KEY": KEY, "ADAPTER_CRITIC_STORE": "none"}
    with run_app(path, toml, **env) as (first, _), run_app(path, toml, **env) as (second, _):
        yield first, second


def test_two_instances_sharing_a_redis_enforce_one_limit(two_servers: tuple[str, str]) -> None:
    first, second = (sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)) for url in two_servers)
    first.chat.completions.create(model="m-direct", messages=MESSAGES)
    answer = second.chat.completions.with_raw_response.create(model="m-direct", messages=MESSAGES)
    assert answer.headers["x-ratelimit-remaining-requests"] == "0"  # the second instance counted the first's run
    for client in (first, second):
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m-direct", messages=MESSAGES)


def _served(upstream_url: str, redis: RedisServer, on_error: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("QUOTA_TEAM_KEY", KEY)
    parsed = tomllib.loads(config_toml(upstream_url, redis.url, on_error))
    parsed["telemetry"] = {"metrics": True}
    return uvicorn_serving(build_app(compose(Config.from_dict(parsed)), prefix="/v1"))


@pytest.mark.parametrize("on_error", ["open", "closed"])
def test_a_redis_stopped_mid_run_follows_on_error(
    on_error: str, upstream_url: str, redis_url: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _served(upstream_url, redis_url, on_error, monkeypatch) as url:
        client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0))
        counted = client.chat.completions.with_raw_response.create(model="m-direct", messages=MESSAGES)
        assert counted.headers["x-ratelimit-remaining-requests"] == "1"
        redis_url.stop()
        if on_error == "open":
            answer = client.chat.completions.with_raw_response.create(model="m-direct", messages=MESSAGES)
            assert answer.parse().choices[0].message.content == "echo api-model: Hi"
            assert "x-ratelimit-remaining-requests" not in answer.headers  # admitted uncounted
        else:
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model="m-direct", messages=MESSAGES)
            assert caught.value.status_code == 503 and caught.value.code == "limits_unavailable"
            assert "limits.on_error" in caught.value.message
        metrics = httpx.get(f"{url}/v1/metrics", headers={"authorization": f"Bearer {KEY}"}).text
        assert f'adapter_critic_limits_errors_total{{on_error="{on_error}"}} 1.0' in metrics
