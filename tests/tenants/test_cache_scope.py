"""The cache is per caller (docs/guides/cache.md#whose-answers-a-hit-may-be): a hit only for the key that stored it
unless `[cache] scope = "shared"`, per caller credential where a target forwards it, only real answers, prefixed
names cached as their served model is, and retention taking a run's answer with it — through real uvicorn with the
openai SDK and a SQLite store file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from adapter_critic.config import Config
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import RemoteUpstream, sdk
from ..limits.conftest import uvicorn_serving

TEAM, OTHER = "sk-team-cache-1", "sk-other-cache-2"
QUESTION: list[Any] = [{"role": "user", "content": "What is 6 x 7?"}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCOPE_TEAM_KEY", TEAM)
    monkeypatch.setenv("SCOPE_OTHER_KEY", OTHER)


def config(upstream_url: str, path: Path, *, keys: bool = True, **extra: Any) -> Config:
    api = {"model": "team-model", "base_url": f"{upstream_url}/v1"}
    given: dict[str, Any] = {
        "retries": 0,
        "served_models": {
            "team-direct": {"mode": "direct", "api": api, "cache": True},
            "team-uncached": {"mode": "direct", "api": api},
        },
        "store": {"url": f"sqlite:///{path}"},
        **extra,
    }
    if keys:
        given["auth"] = {
            "keys": [{"name": "team", "key_env": "SCOPE_TEAM_KEY"}, {"name": "other", "key_env": "SCOPE_OTHER_KEY"}]
        }
    return Config.from_dict(given)


@contextlib.contextmanager
def serving(cfg: Config) -> Iterator[str]:
    with uvicorn_serving(build_app(compose(cfg), prefix="/v1")) as url:
        yield url


def ask(url: str, key: str, model: str = "team-direct") -> tuple[str | None, str | None]:
    """The answer's text and its `x-adapter-critic-cache` header."""
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    raw = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION, temperature=0)
    return raw.parse().choices[0].message.content, raw.headers.get("x-adapter-critic-cache")


@pytest.fixture
def scripted(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url).reset()


def test_a_hit_is_only_for_the_key_that_stored_it(upstream_url: str, scripted: RemoteUpstream, tmp_path: Path) -> None:
    with serving(config(upstream_url, tmp_path / "runs.sqlite3")) as url:
        assert ask(url, TEAM)[1] == "miss"
        assert ask(url, OTHER)[1] == "miss"  # the same question from another tenant: its own upstream call
        assert len(scripted.calls()) == 2
        assert ask(url, TEAM)[1] == "hit" and ask(url, OTHER)[1] == "hit"  # each its own answer
        assert len(scripted.calls()) == 2


def test_a_shared_cache_serves_every_key(upstream_url: str, scripted: RemoteUpstream, tmp_path: Path) -> None:
    with serving(config(upstream_url, tmp_path / "runs.sqlite3", cache={"scope": "shared"})) as url:
        assert ask(url, TEAM)[1] == "miss"
        assert ask(url, OTHER)[1] == "hit"
        assert len(scripted.calls()) == 1


def test_a_forwarding_model_is_cached_per_caller_credential(
    upstream_url: str, scripted: RemoteUpstream, tmp_path: Path
) -> None:
    api = {"model": "team-model", "base_url": f"{upstream_url}/v1", "forward_client_authorization": True}
    cfg = Config.from_dict(
        {
            "retries": 0,
            "served_models": {"fwd": {"mode": "direct", "api": api, "cache": True}},
            "store": {"url": f"sqlite:///{tmp_path / 'runs.sqlite3'}"},
        }
    )
    with serving(cfg) as url:
        assert ask(url, "sk-valid-caller", "fwd")[1] == "miss"
        assert ask(url, "sk-valid-caller", "fwd")[1] == "hit"
        # The upstream refuses a bogus key: the cache must not answer for it, nor for a caller with no key.
        scripted.script({"status": 401, "body": '{"error": {"message": "bad key", "type": "invalid_request_error"}}'})
        with pytest.raises(openai.AuthenticationError):
            ask(url, "sk-bogus", "fwd")
        scripted.script({"status": 401, "body": '{"error": {"message": "no key", "type": "invalid_request_error"}}'})
        client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(
                model="fwd", messages=QUESTION, temperature=0, extra_headers={"authorization": ""}
            )
        bearers = [call["headers"].get("authorization") for call in scripted.calls()]
        assert bearers[:2] == ["Bearer sk-valid-caller", "Bearer sk-bogus"] and len(bearers) == 3


@pytest.mark.parametrize(
    "body",
    [
        '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Overloaded"},'
        ' "finish_reason": "stop"}], "error": {"message": "upstream overloaded"}}',
        '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "partial"}, "finish_reason": "error"}]}',
        '{"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}',
    ],
    ids=["error-field", "finish-error", "empty"],
)
def test_an_answer_the_upstream_meant_as_an_error_is_not_cached(
    upstream_url: str, scripted: RemoteUpstream, tmp_path: Path, body: str
) -> None:
    with serving(config(upstream_url, tmp_path / "runs.sqlite3")) as url:
        scripted.script({"body": body})
        assert ask(url, TEAM)[1] == "miss"
        text, header = ask(url, TEAM)
        assert header == "miss" and text == "echo team-model: What is 6 x 7?"  # the upstream answered, not the cache
        assert len(scripted.calls()) == 2


def test_a_prefixed_name_on_a_cached_models_model_is_cached(
    upstream_url: str, scripted: RemoteUpstream, tmp_path: Path
) -> None:
    cfg = config(
        upstream_url, tmp_path / "runs.sqlite3", models={"technique_prefixes": True, "upstream": "team-direct"}
    )
    with serving(cfg) as url:
        assert ask(url, TEAM, "critic-team-model")[1] == "miss"
        assert len(scripted.calls()) == 3  # draft, critique, revision
        assert ask(url, TEAM, "critic-team-model")[1] == "hit"
        assert ask(url, TEAM, "re2&critic-team-model")[1] == "miss"  # a chain is a plan of its own
        calls = len(scripted.calls())
        assert ask(url, TEAM, "re2&critic-team-model")[1] == "hit"
        assert len(scripted.calls()) == calls
        assert ask(url, TEAM, "critic-other-model")[1] is None  # no cached served model runs that model


def test_runs_removed_by_retention_take_their_answers_with_them(
    upstream_url: str, scripted: RemoteUpstream, tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite3"
    with serving(config(upstream_url, store, keys=False)) as url:
        assert ask(url, "unused")[1] == "miss"
        assert ask(url, "unused")[1] == "hit"
        ask(url, "unused", "team-uncached")  # a newer run: retention keeps only this one
    with serving(config(upstream_url, store, keys=False, store={"url": f"sqlite:///{store}", "max_runs": 1})) as url:
        assert ask(url, "unused")[1] == "miss"  # its run is gone, and its answer with it
    assert len(scripted.calls()) == 3
