"""Limits hold whatever the path (docs/guides/limits.md#how-it-counts): a served model's limits count every run that
uses it, an unpriced override is refused under a budget, what an abandoned stream cost is charged, a budget has a
ceiling under concurrency, and a key's usage is a 503 (not a 500) when the limits' Redis is down — through real
uvicorn with the openai SDK, in-process counters and a real redis-server."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from adapter_critic.config import Config
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import RemoteUpstream, sdk
from ..limits.conftest import uvicorn_serving
from ..limits.redisserver import RedisServer
from ..limits.test_redis import KEY as REDIS_KEY
from ..limits.test_redis import _served as redis_served

TEAM = "sk-team-spend-1"
MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEND_TEAM_KEY", TEAM)


@contextlib.contextmanager
def serving(
    upstream_url: str, team_limits: dict[str, Any], clock: Callable[[], float] = time.time, **extra: Any
) -> Iterator[str]:
    api = {"model": "local-model", "base_url": f"{upstream_url}/v1"}
    given: dict[str, Any] = {
        "retries": 0,
        "models": {"technique_prefixes": True, "upstream": "local"},
        "served_models": {
            "local": {"mode": "direct", "api": api, **extra.pop("local", {})},
            "reviewed-by-local": {"mode": "critic", "api": {"served": "local"}, "critic": {"served": "local"}},
        },
        "auth": {"keys": [{"name": "team", "key_env": "SPEND_TEAM_KEY", "limits": team_limits}]},
        # A completion token costs 1.0, a prompt token nothing: the scripted answer (2 completion tokens) costs 2.0.
        "prices": {"local-model": {"input": 0, "output": 1_000_000}},
        **extra,
    }
    with uvicorn_serving(build_app(compose(Config.from_dict(given), clock=clock), prefix="/v1")) as url:
        yield url


def still() -> Callable[[], float]:
    """A clock for the limits that stands still, in the middle of this minute: the limits count in fixed windows (a
    minute, a UTC day), and a test whose requests straddled a window's end would see the count start again."""
    moment = 60 * math.floor(time.time() / 60) + 30
    return lambda: moment


def client(url: str) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))


def usage(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {TEAM}"})
    assert answer.status_code == 200, answer.text
    return {window["limit"]: window for window in answer.json()["windows"]}


@pytest.mark.parametrize(
    "model", ["critic-local-model", "direct-local-model", "reviewed-by-local", "best_of_n&critic-local-model"]
)
def test_a_served_models_limit_counts_every_run_that_uses_it(upstream_url: str, model: str) -> None:
    RemoteUpstream(upstream_url).reset()
    with serving(upstream_url, {}, clock=still(), local={"limits": {"requests_per_minute": 2}}) as url:
        team = client(url)
        for _ in range(2):
            assert team.chat.completions.create(model=model, messages=MESSAGES).choices
        with pytest.raises(openai.RateLimitError) as caught:
            team.chat.completions.create(model=model, messages=MESSAGES)
        assert "served model 'local'" in caught.value.message
        with pytest.raises(openai.RateLimitError):  # the model itself is out of requests too
            team.chat.completions.create(model="local", messages=MESSAGES)


def test_an_override_to_an_unpriced_model_is_refused_under_a_budget(upstream_url: str) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    with serving(upstream_url, {"cost_per_day": 100.0}) as url:
        overrides = {"api_model": "free-model", "api_base_url": f"{upstream_url}/v1"}
        with pytest.raises(openai.BadRequestError) as caught:
            client(url).chat.completions.create(
                model="local", messages=MESSAGES, extra_body={"x_adapter_critic": overrides}
            )
        assert caught.value.code == "unpriced_model" and "free-model" in caught.value.message
        with pytest.raises(openai.BadRequestError):  # a prefixed name on it, the same
            client(url).chat.completions.create(model="critic-free-model", messages=MESSAGES)
        assert scripted.calls() == []
        assert client(url).chat.completions.create(model="critic-local-model", messages=MESSAGES).choices


def test_what_an_abandoned_stream_cost_is_charged(upstream_url: str) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    scripted.script({"content": "word " * 96, "stream_pause_after": 21})  # 60 chunks of 8 characters, held at 20
    with serving(upstream_url, {"cost_per_day": 1000.0, "tokens_per_minute": 100_000}, clock=still()) as url:
        stream = client(url).chat.completions.create(model="local", messages=MESSAGES, stream=True)
        received = 0
        for chunk in stream:
            received += bool(chunk.choices and chunk.choices[0].delta.content)
            if received == 20:
                break
        stream.close()  # the client goes away with 20 of 60 chunks
        assert len(scripted.aborted(wait=10)) == 1  # the upstream call was cancelled with it
        windows = usage(url)
        for _ in range(1000):  # the charge is written as the cancelled run ends: read until it is there
            if windows["tokens_per_minute"]["used"] > 0:
                break
            windows = usage(url)
        # The upstream reported no usage before the break: 160 characters streamed, estimated at 4 a token.
        assert windows["tokens_per_minute"]["used"] >= 40
        assert windows["cost_per_day"]["used"] == pytest.approx(40.0)  # 40 completion tokens at 1.0


def test_a_cost_budget_holds_under_concurrent_requests(upstream_url: str) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    scripted.script({"content": "ok", "delay": 0.2, "keep": True})
    with serving(upstream_url, {"cost_per_day": 5.0}, clock=still()) as url:
        team = client(url)

        def ask(_: int) -> bool:
            try:
                team.chat.completions.create(model="local", messages=MESSAGES, max_tokens=2)
            except openai.RateLimitError:
                return False
            return True

        with ThreadPoolExecutor(20) as pool:
            admitted = sum(pool.map(ask, range(20)))
        # Each run reserves its worst case (2 tokens at 1.0) as it is admitted: 0, 2 and 4 have room, 6 does not.
        assert admitted == 3
        assert usage(url)["cost_per_day"]["used"] == pytest.approx(6.0)  # one run's reservation past 5.0, no more
        assert len(scripted.calls()) == 3


def test_a_keys_usage_is_a_503_when_the_limits_redis_is_down(
    upstream_url: str, redis_url: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    RemoteUpstream(upstream_url).reset()
    with redis_served(upstream_url, redis_url, "closed", monkeypatch) as url:
        headers = {"authorization": f"Bearer {REDIS_KEY}"}
        assert httpx.get(f"{url}/v1/keys/team/usage", headers=headers).status_code == 200
        redis_url.stop()
        answer = httpx.get(f"{url}/v1/keys/team/usage", headers=headers)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "limits_unavailable" and "retry-after" in answer.headers


def test_a_keys_usage_counts_each_request_once_whatever_runs_it_nests(upstream_url: str, tmp_path: Path) -> None:
    RemoteUpstream(upstream_url).reset()
    with serving(upstream_url, {}, store={"url": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}) as url:
        answer = client(url).chat.completions.create(model="reviewed-by-local", messages=MESSAGES)
        assert answer.usage is not None
        found = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {TEAM}"}).json()
    # Two child runs (its api and critic stages) are recorded beside it; their tokens are the request's already.
    assert (found["today"]["requests"], found["today"]["tokens"]) == (1, answer.usage.total_tokens)
