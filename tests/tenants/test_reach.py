"""A named key reaches only its models (docs/guides/security.md#tenants): its model list, the models it may ask, the
targets its overrides may name, and the upstream keys sent on its behalf — through real uvicorn with the SDKs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from adapter_critic.config import Config
from adapter_critic.errors import ConfigError
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import RemoteUpstream, run_server, sdk
from ..limits.conftest import uvicorn_serving

TEAM, OTHER, OPS, NAMELESS = "sk-team-1", "sk-other-2", "sk-ops-3", "sk-nameless-4"
SECRET_UPSTREAM_KEY = "sk-secret-upstream-0123456789"
TEAM_UPSTREAM_KEY = "sk-team-upstream-9876543210"
MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def secret_url() -> Iterator[str]:
    """A second scripted upstream: the one only `secret-direct` calls, with its own upstream key."""
    with run_server(["-m", "tests.scripted_upstream"]) as (url, _):
        yield url


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_TEAM_KEY", TEAM)
    monkeypatch.setenv("REACH_OTHER_KEY", OTHER)
    monkeypatch.setenv("REACH_NAMELESS_KEYS", NAMELESS)
    monkeypatch.setenv("REACH_SECRET_UPSTREAM", SECRET_UPSTREAM_KEY)
    monkeypatch.setenv("REACH_TEAM_UPSTREAM", TEAM_UPSTREAM_KEY)


def config(upstream_url: str, secret_url: str, **team: Any) -> dict[str, Any]:
    team_api = {"model": "team-model", "base_url": f"{upstream_url}/v1", "api_key_env": "REACH_TEAM_UPSTREAM"}
    secret_api = {"model": "secret-model", "base_url": f"{secret_url}/v1", "api_key_env": "REACH_SECRET_UPSTREAM"}
    return {
        "retries": 0,
        "auth_api_keys_env": "REACH_NAMELESS_KEYS",
        "allowed_override_base_urls": [f"{secret_url}/v1"],
        "models": {"technique_prefixes": True, "upstream": "team-direct"},
        "served_models": {
            "team-direct": {"mode": "direct", "api": team_api},
            "team-critic": {"mode": "critic", "api": team_api, "critic": team_api},
            "secret-direct": {"mode": "direct", "api": secret_api},
        },
        "auth": {
            "keys": [
                {"name": "team", "key_env": "REACH_TEAM_KEY", "models": ["team-*", "critic-team-*"], **team},
                {"name": "other", "key_env": "REACH_OTHER_KEY", "models": ["team-*"], "allow_overrides": False},
                {"name": "ops", "key_sha256": hashlib.sha256(OPS.encode()).hexdigest(), "admin": True},
            ]
        },
    }


@pytest.fixture
def served(upstream_url: str, secret_url: str) -> Iterator[str]:
    """The app (as the standalone server serves it, under `/v1`) in real uvicorn; both upstreams reset."""
    RemoteUpstream(upstream_url).reset()
    RemoteUpstream(secret_url).reset()
    service = compose(Config.from_dict(config(upstream_url, secret_url)))
    with uvicorn_serving(build_app(service, prefix="/v1")) as url:
        yield url


def client(url: str, key: str) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))


def test_an_override_to_another_served_models_target_is_403_and_nothing_goes_upstream(
    served: str, upstream_url: str, secret_url: str
) -> None:
    overrides = {"api_model": "secret-model", "api_base_url": f"{secret_url}/v1"}
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(served, TEAM).chat.completions.create(
            model="team-direct", messages=MESSAGES, extra_body={"x_adapter_critic": overrides}
        )
    assert caught.value.status_code == 403
    assert caught.value.code == "permission_denied"
    assert "team" in caught.value.message and SECRET_UPSTREAM_KEY not in caught.value.message
    assert RemoteUpstream(secret_url).calls() == [] and RemoteUpstream(upstream_url).calls() == []
    # The same override from a key with no `models` list is the server's overrides as before: the secret upstream
    # is called, with the key bound to its URL.
    reply = client(served, OPS).chat.completions.create(
        model="team-direct", messages=MESSAGES, extra_body={"x_adapter_critic": overrides}
    )
    assert reply.choices[0].message.content
    (call,) = RemoteUpstream(secret_url).calls()
    assert call["headers"]["authorization"] == f"Bearer {SECRET_UPSTREAM_KEY}"


def test_an_override_within_the_keys_own_targets_is_allowed(served: str, upstream_url: str) -> None:
    overrides = {"critic_model": "team-model", "critic_base_url": f"{upstream_url}/v1"}
    reply = client(served, TEAM).chat.completions.create(
        model="team-critic", messages=MESSAGES, extra_body={"x_adapter_critic": overrides}
    )
    assert reply.choices[0].message.content
    calls = RemoteUpstream(upstream_url).calls()
    assert len(calls) == 3 and {c["headers"]["authorization"] for c in calls} == {f"Bearer {TEAM_UPSTREAM_KEY}"}


def test_a_key_with_allow_overrides_false_may_send_none(served: str, upstream_url: str) -> None:
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(served, OTHER).chat.completions.create(
            model="team-direct", messages=MESSAGES, extra_body={"x_adapter_critic": {"mode": "critic"}}
        )
    assert "allow_overrides = false" in caught.value.message
    assert RemoteUpstream(upstream_url).calls() == []
    claude = sdk(anthropic.Anthropic(base_url=served, api_key=OTHER, max_retries=0))
    with pytest.raises(anthropic.PermissionDeniedError):  # the same refusal in Anthropic's envelope
        claude.messages.create(
            model="team-direct", max_tokens=20, messages=MESSAGES, extra_body={"x_adapter_critic": {"mode": "critic"}}
        )
    assert client(served, OTHER).chat.completions.create(model="team-direct", messages=MESSAGES).choices


def test_the_model_list_shows_a_key_only_its_models(served: str) -> None:
    team = client(served, TEAM)
    assert sorted(model.id for model in team.models.list()) == ["team-critic", "team-direct"]
    with pytest.raises(openai.NotFoundError):
        team.models.retrieve("secret-direct")
    assert team.models.retrieve("team-direct").id == "team-direct"
    assert team.models.retrieve("critic-team-model").id == "critic-team-model"  # a prefixed name it may use
    listed = sorted(model.id for model in client(served, OPS).models.list())
    assert listed == ["secret-direct", "team-critic", "team-direct"]  # no `models`: every served model
    assert "secret-direct" in [model.id for model in client(served, NAMELESS).models.list()]


def test_the_404_for_a_model_the_key_may_not_use_names_only_its_own(served: str, secret_url: str) -> None:
    for model in ("secret-direct", "critic-secret-model"):
        with pytest.raises(openai.NotFoundError) as caught:
            client(served, TEAM).chat.completions.create(model=model, messages=MESSAGES)
        assert "secret-direct" not in caught.value.message.split("Served models:")[1]
    count = httpx.post(
        f"{served}/v1/messages/count_tokens",
        headers={"x-api-key": TEAM},
        json={"model": "secret-direct", "messages": MESSAGES},
    )
    assert count.status_code == 404 and count.json()["error"]["type"] == "not_found_error"
    assert RemoteUpstream(secret_url).calls() == []


@pytest.mark.parametrize(
    "name",
    ["critic-" + "x" * 100_000, "critic-a\x00b", "critic-a\nb", "critic-../../etc", "critic-http://evil.example/x"],
    ids=["100kB", "nul", "newline", "dotdot", "url"],
)
def test_a_prefixed_name_that_no_upstream_could_serve_is_400(served: str, upstream_url: str, name: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served, OPS).chat.completions.create(model=name, messages=MESSAGES)
    assert caught.value.code == "invalid_model_name" and caught.value.param == "model"
    assert name not in caught.value.message
    assert RemoteUpstream(upstream_url).calls() == []


def test_real_model_names_are_accepted(served: str, upstream_url: str) -> None:
    for name in ("critic-team-model", "critic-Qwen/Qwen2.5-7B-Instruct", "critic-llama3:8b", "re2&critic-gpt-4.1"):
        assert client(served, OPS).chat.completions.create(model=name, messages=MESSAGES).choices
    assert "Qwen/Qwen2.5-7B-Instruct" in RemoteUpstream(upstream_url).models()


@pytest.mark.parametrize("pattern", ["[unclosed", "team-[", "nothing-serves-this"])
def test_a_models_glob_that_cannot_match_is_a_config_error(upstream_url: str, pattern: str) -> None:
    given = config(upstream_url, upstream_url)
    given["models"] = {}
    given["auth"]["keys"][0]["models"] = [pattern]
    with pytest.raises((ConfigError, ValueError)) as caught:
        Config.from_dict(given)
    assert repr(pattern) in str(caught.value)
    given["auth"]["keys"][0]["models"] = ["team-[dc]*"]  # a closed set matches
    assert Config.from_dict(given).auth.keys[0].models == ["team-[dc]*"]


def test_a_bounded_key_never_reaches_the_passthrough(upstream_url: str, secret_url: str) -> None:
    """The passthrough could call any model at its upstream with its upstream key: a key with `models` gets its own
    served models only — a model the server does not serve is 404, a path relayed to it 403, the list its own."""
    RemoteUpstream(upstream_url).reset()
    secret = RemoteUpstream(secret_url).reset()
    given = config(upstream_url, secret_url)
    given["passthrough"] = {"model": "any", "base_url": f"{secret_url}/v1", "api_key_env": "REACH_SECRET_UPSTREAM"}
    with uvicorn_serving(build_app(compose(Config.from_dict(given)), prefix="/v1")) as url:
        with pytest.raises(openai.NotFoundError):
            client(url, TEAM).chat.completions.create(model="secret-model", messages=MESSAGES)
        embeddings = httpx.post(
            f"{url}/v1/embeddings", headers={"authorization": f"Bearer {TEAM}"}, json={"model": "e", "input": "x"}
        )
        assert embeddings.status_code == 403 and embeddings.json()["error"]["code"] == "permission_denied"
        assert sorted(model.id for model in client(url, TEAM).models.list()) == ["team-critic", "team-direct"]
        assert secret.calls() == []  # nothing reached the passthrough's upstream for the bounded key
        relayed = httpx.post(
            f"{url}/v1/embeddings", headers={"authorization": f"Bearer {OPS}"}, json={"model": "e", "input": "x"}
        )
        assert relayed.status_code == 200, relayed.text
        assert len(secret.calls()) == 1  # a key without `models` still uses it
