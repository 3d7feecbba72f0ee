"""Where answers are kept: the run store's database — SQLite (`test_hits`) and a throw-away PostgreSQL here — or a
throw-away Redis (`[cache] url`). Each keeps an answer across a restart; an answer expires after its time to live;
a Redis that goes down is a miss, never a failed request."""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from adapter_critic.config import Config
from adapter_critic.errors import ConfigError
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import RemoteUpstream, run_app, sdk, stop_server, unavailable
from ..limits.conftest import Clock, uvicorn_serving
from ..limits.redisserver import RedisServer
from ..store.pgserver import execute, postgres_server
from ..store.pgserver import missing_reason as postgres_missing
from .conftest import UP_KEY, config_toml

MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]
HEADER = "x-adapter-critic-cache"


def _ask(url: str) -> tuple[str, str]:
    """One deterministic request: the cache header and the answer's text."""
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
    raw = client.chat.completions.with_raw_response.create(model="reviewed", messages=MESSAGES, temperature=0)
    return raw.headers.get(HEADER, ""), raw.parse().choices[0].message.content or ""


@pytest.fixture
def postgres_store() -> Iterator[str]:
    reason = postgres_missing()
    if reason is not None:
        unavailable(reason)
    with postgres_server() as server:
        execute(f"{server}/postgres", "CREATE DATABASE cache_runs")
        yield f"{server}/cache_runs"


def _across_a_restart(path: Path, toml: str, scripted: RemoteUpstream, **env: str) -> None:
    with run_app(path, toml, CACHE_UP_KEY=UP_KEY, **env) as (url, proc):
        said, first = _ask(url)
        assert said == "miss"
        stop_server(proc)  # a graceful stop writes what it was keeping
    with run_app(path, toml, CACHE_UP_KEY=UP_KEY, **env) as (url, _):
        assert _ask(url) == ("hit", first)
    assert len(scripted.calls()) == 3  # the first run's three stage calls, and none after


def test_answers_kept_in_a_postgresql_store_are_found_after_a_restart(
    upstream_url: str, postgres_store: str, tmp_path: Path
) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    _across_a_restart(tmp_path / "pg.toml", config_toml(upstream_url, postgres_store), scripted)


def test_answers_kept_in_redis_are_found_after_a_restart_without_a_store(
    upstream_url: str, redis_url: RedisServer, tmp_path: Path
) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    toml = config_toml(upstream_url) + f'\n[cache]\nurl = "{redis_url.url}"\nkey_prefix = "t"\n'
    _across_a_restart(tmp_path / "redis.toml", toml, scripted, ADAPTER_CRITIC_STORE="none")


def test_a_redis_that_goes_down_is_a_miss(
    upstream_url: str, redis_url: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    monkeypatch.setenv("CACHE_UP_KEY", UP_KEY)
    parsed = tomllib.loads(config_toml(upstream_url) + f'\n[cache]\nurl = "{redis_url.url}"\n')
    with uvicorn_serving(build_app(compose(Config.from_dict(parsed)), prefix="/v1")) as url:
        redis_url.stop()
        with caplog.at_level(logging.WARNING, logger="adapter_critic"):
            assert _ask(url)[0] == "miss"
    assert len(scripted.calls()) == 3
    assert any("cache: a lookup failed" in record.getMessage() for record in caplog.records)


def test_an_answer_expires_after_its_time_to_live(
    upstream_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    monkeypatch.setenv("CACHE_UP_KEY", UP_KEY)
    toml = config_toml(upstream_url, f"sqlite:///{tmp_path / 'runs.sqlite3'}", ttl="cache_ttl_seconds = 60")
    clock = Clock(1_800_000_000.0)
    with uvicorn_serving(build_app(compose(Config.from_dict(tomllib.loads(toml)), clock=clock), prefix="/v1")) as url:
        assert [_ask(url)[0], _ask(url)[0]] == ["miss", "hit"]
        clock.now += 59
        assert _ask(url)[0] == "hit"
        clock.now += 2
        assert _ask(url)[0] == "miss"
    assert len(scripted.calls()) == 6


def test_a_cache_with_nowhere_to_keep_answers_is_a_config_error(upstream_url: str) -> None:
    config = Config.from_dict(tomllib.loads(config_toml(upstream_url)))
    with pytest.raises(ConfigError, match=r"served_models.reviewed.cache: .*store.url.*\[cache\] url"):
        compose(config)  # a mounted app records no runs by default
    metadata = tomllib.loads(
        config_toml(upstream_url, "sqlite:///x.db").replace('url = "sqlite', 'capture = "metadata"\nurl = "sqlite')
    )
    with pytest.raises(ConfigError, match=r'store\.capture = "metadata"'):
        Config.from_dict(metadata)
