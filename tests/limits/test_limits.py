"""Limits per caller and per served model, through real uvicorn with the official SDKs (docs/guides/limits.md).

The app runs in this process (`uvicorn_serving`) so its limits' clock is the test's: it stands just before a
window's end, and moves on when the client is told to wait — the wait the SDK then makes is the one the server
asked for, and nothing in a test sleeps to synchronise."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from adapter_critic import create_app
from adapter_critic.config import Config
from adapter_critic.errors import ConfigError
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..cli.conftest import invoke
from ..conftest import RemoteUpstream, make_config, sdk
from .conftest import Clock, uvicorn_serving

TEAM, OTHER, ADMIN = "sk-team-1", "sk-other-2", "sk-admin-3"
WINDOW_END = 60 * 29_000_000 - 0.05  # 50 ms before a minute's window ends
MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTA_TEAM_KEY", TEAM)
    monkeypatch.setenv("QUOTA_OTHER_KEY", OTHER)


def config(upstream_url: str, tmp_path: Path, team: dict[str, Any], **shared: Any) -> Config:
    api = {"model": "api-model", "base_url": f"{upstream_url}/v1"}
    return Config.from_dict(
        {
            "retries": 0,
            "default_api_key_env": "QUOTA_UP_KEY",
            "served_models": {
                "m-direct": {"mode": "direct", "api": api},
                "m-critic": {"mode": "critic", "api": api, "critic": api},
                "m-shared": {"mode": "direct", "api": api, "limits": shared},
            },
            "auth": {
                "keys": [
                    {"name": "team", "key_env": "QUOTA_TEAM_KEY", "models": ["m-d*", "m-shared"], "limits": team},
                    {"name": "other", "key_env": "QUOTA_OTHER_KEY"},
                    {"name": "ops", "key_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(), "admin": True},
                ]
            },
            "store": {"url": f"sqlite:///{tmp_path / 'runs.sqlite3'}"},
            # The scripted answer's 1 prompt and 2 completion tokens cost 0.3.
            "prices": {"api-model": {"input": 100_000, "output": 100_000}},
            "telemetry": {"metrics": True},
        }
    )


@pytest.fixture
def served(upstream_url: str, tmp_path: Path) -> Iterator[Any]:
    """`served(team_limits, **shared_limits)`: the app's URL and its clock."""
    RemoteUpstream(upstream_url).reset()
    stack: list[Any] = []

    def start(team: dict[str, Any], **shared: Any) -> tuple[str, Clock]:
        clock = Clock(WINDOW_END)
        service = compose(config(upstream_url, tmp_path, team, **shared), clock=clock)
        serving = uvicorn_serving(build_app(service, prefix="/v1"))  # as the standalone server serves it
        stack.append(serving)
        return serving.__enter__(), clock

    yield start
    for serving in stack:
        serving.__exit__(None, None, None)


def test_the_openai_sdk_retries_after_the_window_the_429_names(served: Any) -> None:
    url, clock = served({"requests_per_minute": 1})
    statuses: list[int] = []

    def seen(response: httpx.Response) -> None:
        statuses.append(response.status_code)
        if response.status_code == 429:
            clock.now += float(response.headers["retry-after-ms"]) / 1000  # the time the SDK waits passes

    http = httpx.Client(event_hooks={"response": [seen]})
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=1, http_client=http))
    first = client.chat.completions.with_raw_response.create(model="m-direct", messages=MESSAGES)
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-reset-requests"] == "50ms"
    answer = client.chat.completions.create(model="m-direct", messages=MESSAGES)
    assert answer.choices[0].message.content == "echo api-model: Hi"
    assert statuses == [200, 429, 200]  # refused in the full window, admitted by the SDK's retry in the next


def test_a_429_is_openais_rate_limit_error_with_retry_after_and_the_headers(served: Any) -> None:
    url, _ = served({"requests_per_minute": 1})
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    client.chat.completions.create(model="m-direct", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m-direct", messages=MESSAGES)
    error = caught.value
    assert error.body is not None and error.code == "rate_limit_exceeded" and error.type == "rate_limit_error"
    assert "key 'team'" in error.message and "requests_per_minute" in error.message
    headers = error.response.headers
    assert headers["retry-after"] == "1" and headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-limit-requests"] == "1"


def test_tokens_are_charged_when_a_run_ends_and_refuse_the_next(served: Any) -> None:
    url, _ = served({"tokens_per_minute": 3})  # the scripted upstream's answer uses 3 tokens
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    first = client.chat.completions.with_raw_response.create(model="m-direct", messages=MESSAGES)
    assert first.headers["x-ratelimit-limit-tokens"] == "3"
    assert first.headers["x-ratelimit-remaining-tokens"] == "3"  # admitted with room; charged after
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m-direct", messages=MESSAGES)
    assert "tokens_per_minute" in caught.value.message
    assert caught.value.response.headers["x-ratelimit-remaining-tokens"] == "0"


def test_a_streamed_answer_carries_the_headers(served: Any) -> None:
    url, _ = served({"requests_per_minute": 5})
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    with client.chat.completions.with_streaming_response.create(
        model="m-direct", messages=MESSAGES, stream=True
    ) as response:
        assert response.headers["x-ratelimit-remaining-requests"] == "4"
        assert "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices) == "echo api-model: Hi"


def test_anthropic_clients_get_anthropics_envelope(served: Any) -> None:
    url, _ = served({"requests_per_minute": 1})
    client = sdk(anthropic.Anthropic(base_url=url, api_key=TEAM, max_retries=0))
    client.messages.create(model="m-direct", max_tokens=50, messages=MESSAGES)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="m-direct", max_tokens=50, messages=MESSAGES)
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_responses_clients_get_a_429(served: Any) -> None:
    url, _ = served({"requests_per_minute": 1})
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    client.responses.create(model="m-direct", input="Hi")
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m-direct", input="Hi")
    assert caught.value.code == "rate_limit_exceeded" and caught.value.type == "rate_limit_error"
    assert caught.value.response.headers["x-ratelimit-limit-requests"] == "1"


def test_a_served_models_limit_applies_to_all_callers_together(served: Any) -> None:
    url, _ = served({}, requests_per_minute=1)
    team = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    other = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=OTHER, max_retries=0))
    team.chat.completions.create(model="m-shared", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as caught:
        other.chat.completions.create(model="m-shared", messages=MESSAGES)
    assert "served model 'm-shared'" in caught.value.message
    assert other.chat.completions.create(model="m-direct", messages=MESSAGES).choices  # other models are not limited


def test_a_model_not_on_the_keys_list_is_not_found(served: Any) -> None:
    url, _ = served({})
    team = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    with pytest.raises(openai.NotFoundError) as caught:
        team.chat.completions.create(model="m-critic", messages=MESSAGES)
    assert caught.value.code == "model_not_found"
    assert "m-critic" not in caught.value.message.split("Served models:")[1]  # only the models it may use
    assert "m-direct" in caught.value.message
    claude = sdk(anthropic.Anthropic(base_url=url, api_key=TEAM, max_retries=0))
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="m-critic", max_tokens=50, messages=MESSAGES)
    other = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=OTHER, max_retries=0))
    assert other.chat.completions.create(model="m-critic", messages=MESSAGES).choices  # no list: every model


def test_usage_is_the_keys_own_or_an_admins_to_read(served: Any, tmp_path: Path) -> None:
    url, _ = served({"requests_per_minute": 10, "cost_per_day": 5})
    team = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    team.chat.completions.create(model="m-direct", messages=MESSAGES)
    team.chat.completions.create(model="m-direct", messages=MESSAGES, stream=True).close()
    own = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {TEAM}"})
    assert own.status_code == 200, own.text
    usage = own.json()
    assert usage["object"] == "key.usage" and usage["name"] == "team"
    assert usage["today"]["requests"] == usage["month"]["requests"] == 2
    assert usage["today"]["cost"] == usage["month"]["cost"] == 0.6  # the runs' known cost, from the run store
    windows = {w["limit"]: w for w in usage["windows"]}
    assert windows["requests_per_minute"]["used"] == 2 and windows["requests_per_minute"]["remaining"] == 8
    assert windows["cost_per_day"]["used"] == pytest.approx(0.6) and windows["cost_per_day"]["value"] == 5
    admin = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {ADMIN}"})
    assert admin.status_code == 200 and admin.json()["today"]["requests"] == 2
    refused = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {OTHER}"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert httpx.get(f"{url}/v1/keys/nobody/usage", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 404
    assert httpx.get(f"{url}/v1/keys/team/usage").status_code == 401
    shown = invoke("keys", "usage", "team", "--store", f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    assert shown.exit_code == 0, shown.output
    assert "team today: 2 requests, 6 tokens, cost 0.6" in shown.output


def test_without_limits_no_limit_work_is_done() -> None:
    app = create_app(make_config())
    assert app.state.adapter_critic.chat.limits is None


def test_a_daily_budget_admits_runs_until_their_cost_reaches_it(served: Any) -> None:
    url, _ = served({"cost_per_day": 0.5})
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=TEAM, max_retries=0))
    for _ in range(2):  # 0, then 0.3 spent: room left; the second run takes the day to 0.6 (one run's overshoot)
        client.chat.completions.create(model="m-direct", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m-direct", messages=MESSAGES)
    assert "cost_per_day" in caught.value.message and "key 'team'" in caught.value.message
    assert int(caught.value.response.headers["retry-after"]) > 60  # until midnight UTC, not the minute's end


def test_a_cost_budget_needs_prices() -> None:
    keys = [{"name": "team", "key_env": "QUOTA_TEAM_KEY", "limits": {"cost_per_month": 10}}]
    with pytest.raises(ConfigError, match="cost budget needs \\[prices\\]"):
        make_config(auth={"keys": keys})
