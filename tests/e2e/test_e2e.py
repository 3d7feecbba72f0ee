"""End to end: real `uvicorn adapter_critic.asgi:app` in a subprocess, in front of the scripted upstream
running as a real server, driven with the official `openai` SDK (SPEC §1.3, §2-§7).

The servers start once per module; each test resets the upstream's script and recorded calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from adapter_critic.demo import demo_config
from adapter_critic.version import USER_AGENT

from ..conftest import UVICORN, Server, run_app, run_server, sdk, stop_server
from ..conftest import RemoteUpstream as Upstream
from ..helpers import direct_toml, extension

KEY = "sk-test-e2e"
DEMO_MODELS = list(demo_config().served_models)
MESSAGES: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]


def config_toml(upstream_url: str, *, timeout_seconds: float = 10) -> str:
    up = f"{upstream_url}/v1"
    local = f"{upstream_url}/local/v1"  # same server, another configured URL whose key env var is empty
    return f"""
default_api_key_env = "UP_KEY"
timeout_seconds = {timeout_seconds}
retries = 0  # one scripted failure is the request's failure (retries: tests/upstream/test_resilience.py)
allowed_override_base_urls = ["{upstream_url}/elsewhere/v1"]

[served_models.e2e-direct]
mode = "direct"
api = {{ model = "api-model", base_url = "{up}" }}

[served_models.e2e-adapter]
mode = "adapter"
api = {{ model = "api-model", base_url = "{up}" }}
adapter = {{ model = "adapter-model", base_url = "{up}", options = {{ temperature = 0 }} }}

[served_models.e2e-critic]
mode = "critic"
api = {{ model = "api-model", base_url = "{up}" }}
critic = {{ model = "critic-model", base_url = "{up}" }}

[served_models.e2e-local]
mode = "direct"
api = {{ model = "local-model", base_url = "{local}", api_key_env = "E2E_LOCAL_KEY" }}
"""


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


def start_app(upstream_url: str, directory: Path, name: str, **options: Any) -> Server:
    """`run_app` with a config file pointing at the scripted upstream."""
    return run_app(directory / f"{name}.toml", config_toml(upstream_url, **options), UP_KEY=KEY, E2E_LOCAL_KEY="")


@pytest.fixture(scope="module")
def app_url(upstream_url: str, config_dir: Path) -> Iterator[str]:
    with start_app(upstream_url, config_dir, "main") as (url, _):
        yield url


@pytest.fixture(scope="module")
def impatient_app_url(upstream_url: str, config_dir: Path) -> Iterator[str]:
    """A second app whose upstream timeout is tiny, so only the timeout test waits on it."""
    with start_app(upstream_url, config_dir, "impatient", timeout_seconds=0.2) as (url, _):
        yield url


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))


# -- the three modes -------------------------------------------------------------------------------


def test_models_and_health(client: OpenAI, app_url: str, up: Upstream) -> None:
    assert [m.id for m in client.models.list()] == ["e2e-direct", "e2e-adapter", "e2e-critic", "e2e-local"]
    assert httpx.get(f"{app_url}/v1/health").json() == {"status": "ok"}
    assert up.calls() == []


def test_the_sdk_retrieves_a_served_model(client: OpenAI, up: Upstream) -> None:
    model = client.models.retrieve("e2e-critic")
    assert (model.id, model.object, model.owned_by) == ("e2e-critic", "model", "adapter-critic")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("not-served")


def test_n_above_one_is_a_bad_request_naming_n_in_a_one_answer_mode(client: OpenAI, up: Upstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="e2e-critic", messages=MESSAGES, n=2)
    assert info.value.body["param"] == "n"  # type: ignore[index]
    assert up.calls() == []


def test_n_choices_are_relayed_in_direct_mode(client: OpenAI, up: Upstream) -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": f"take {i}"}, "finish_reason": "stop"} for i in (0, 1)
    ]
    up.script({"body": json.dumps({"choices": choices})})
    completion = client.chat.completions.create(model="e2e-direct", messages=MESSAGES, n=2)
    assert [choice.message.content for choice in completion.choices] == ["take 0", "take 1"]


def test_the_sdk_sees_logprobs_and_cached_tokens(client: OpenAI, up: Upstream) -> None:
    logprobs = {"content": [{"token": "In", "logprob": -0.2, "bytes": [73, 110], "top_logprobs": []}]}
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    up.script({"content": "In Paris.", "choice_extra": {"logprobs": logprobs}, "usage": usage})
    completion = client.chat.completions.create(model="e2e-direct", messages=MESSAGES, logprobs=True)
    choice_logprobs = completion.choices[0].logprobs
    assert choice_logprobs is not None and choice_logprobs.content is not None
    assert choice_logprobs.content[0].token == "In"
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 8


def test_direct(client: OpenAI, up: Upstream) -> None:
    up.script({"content": "In Paris.", "model": "api-model"})
    response = client.chat.completions.create(
        model="e2e-direct", messages=MESSAGES, temperature=0.25, extra_body={"x_adapter_critic": {"mode": "direct"}}
    )

    assert response.model == "e2e-direct"
    assert response.choices[0].message.content == "In Paris."
    assert extension(response)["mode"] == "direct"
    assert extension(response)["intermediate"] == {"api": "In Paris."}
    assert response.usage is not None and response.usage.total_tokens == 3
    [call] = up.calls()
    assert call["path"] == "/v1/chat/completions"
    assert call["body"]["model"] == "api-model"
    assert call["body"]["temperature"] == 0.25
    assert "x_adapter_critic" not in call["body"]
    assert call["headers"]["authorization"] == f"Bearer {KEY}"  # the configured key, not the client's "x"
    assert call["headers"]["user-agent"] == USER_AGENT  # not the HTTP library's own


def test_adapter_applies_the_edits(client: OpenAI, up: Upstream) -> None:
    edit = "<<<<<<< SEARCH\nin Lyon\n=======\nin Paris\n>>>>>>> REPLACE"
    up.script(
        {"content": "The Eiffel Tower is in Lyon, France.", "model": "api-model"},
        {"content": edit, "model": "adapter-model"},
    )
    response = client.chat.completions.create(
        model="e2e-adapter", messages=MESSAGES, extra_body={"x_adapter_critic": {"max_adapter_retries": 1}}
    )

    assert response.choices[0].message.content == "The Eiffel Tower is in Paris, France."
    ext = extension(response)
    assert ext["mode"] == "adapter"
    assert ext["intermediate"]["api_draft"] == "The Eiffel Tower is in Lyon, France."
    assert ext["intermediate"]["adapter"] == edit
    assert ext["intermediate"]["final"] == "The Eiffel Tower is in Paris, France."
    assert set(ext["tokens"]["stages"]) == {"api", "adapter"}
    calls = up.calls()
    assert [c["body"]["model"] for c in calls] == ["api-model", "adapter-model"]
    assert calls[1]["body"]["temperature"] == 0  # the adapter target's own options
    assert all(c["headers"]["authorization"] == f"Bearer {KEY}" for c in calls)
    assert [c["headers"]["user-agent"] for c in calls] == [USER_AGENT] * 2  # a stage's calls say the same


def test_critic_revises_with_an_overridden_critic_model(client: OpenAI, up: Upstream) -> None:
    up.script(
        {"content": "It is in Lyon.", "model": "api-model"},
        {"content": "Wrong city: it is in Paris.", "model": "critic-model-2"},
        {"content": "It is in Paris.", "model": "api-model"},
    )
    response = client.chat.completions.create(
        model="e2e-critic", messages=MESSAGES, extra_body={"x_adapter_critic": {"critic_model": "critic-model-2"}}
    )

    assert response.choices[0].message.content == "It is in Paris."
    ext = extension(response)
    assert ext["mode"] == "critic"
    assert ext["intermediate"] == {
        "api_draft": "It is in Lyon.",
        "critic": "Wrong city: it is in Paris.",
        "final": "It is in Paris.",
    }
    assert response.usage is not None and response.usage.total_tokens == 9
    calls = up.calls()
    assert [c["body"]["model"] for c in calls] == ["api-model", "critic-model-2", "api-model"]
    assert "Wrong city: it is in Paris." in str(calls[2]["body"]["messages"][-1])
    assert all(c["headers"]["authorization"] == f"Bearer {KEY}" for c in calls)


def test_mode_override_falls_back_to_the_api_target(client: OpenAI, up: Upstream) -> None:
    response = client.chat.completions.create(
        model="e2e-direct", messages=MESSAGES, extra_body={"x_adapter_critic": {"mode": "adapter"}}
    )

    assert extension(response)["mode"] == "adapter"
    assert up.models() == ["api-model", "api-model"]


# -- credentials -----------------------------------------------------------------------------------


def test_no_authorization_for_a_target_without_a_key(client: OpenAI, up: Upstream) -> None:
    response = client.chat.completions.create(model="e2e-local", messages=MESSAGES)

    assert response.choices[0].message.content == "echo local-model: Where is the Eiffel Tower?"
    [call] = up.calls()
    assert call["path"] == "/local/v1/chat/completions"
    assert "authorization" not in call["headers"]


def test_no_authorization_for_an_allowed_unconfigured_override_url(
    client: OpenAI, up: Upstream, upstream_url: str
) -> None:
    override = {"api_base_url": f"{upstream_url}/elsewhere/v1"}
    client.chat.completions.create(model="e2e-direct", messages=MESSAGES, extra_body={"x_adapter_critic": override})

    [call] = up.calls()
    assert call["path"] == "/elsewhere/v1/chat/completions"
    assert "authorization" not in call["headers"]  # the key stays bound to its configured URL


# -- errors through the SDK's exception classes ----------------------------------------------------


def test_unknown_model_is_not_found(client: OpenAI, up: Upstream) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)

    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert up.calls() == []


def test_bad_override_is_a_bad_request(client: OpenAI, up: Upstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="e2e-direct", messages=MESSAGES, extra_body={"x_adapter_critic": {"bogus_field": 1}}
        )

    assert "bogus_field" in info.value.message
    assert up.calls() == []


def test_disallowed_override_url_is_a_bad_request(client: OpenAI, up: Upstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="e2e-direct",
            messages=MESSAGES,
            extra_body={"x_adapter_critic": {"api_base_url": "http://attacker.invalid/v1"}},
        )

    assert "api_base_url" in info.value.message
    assert up.calls() == []


def test_upstream_429_is_a_rate_limit_error_with_retry_after(client: OpenAI, up: Upstream) -> None:
    error = '{"error": {"message": "slow down", "type": "rate_limit_error"}}'
    up.script({"status": 429, "body": error, "headers": {"retry-after": "7"}})
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="e2e-direct", messages=MESSAGES)

    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert "x-should-retry" not in info.value.response.headers  # the SDK may honour Retry-After instead
    assert "slow down" in info.value.message


def test_upstream_429_without_retry_after_still_tells_the_sdk_when_to_retry(client: OpenAI, up: Upstream) -> None:
    up.script({"status": 429, "body": '{"error": {"message": "slow down"}}'})
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="e2e-critic", messages=MESSAGES)

    # No Retry-After upstream: the server's own estimate (its next backoff, whole seconds, at least 1).
    assert info.value.response.headers["retry-after"] == "1"
    assert "x-should-retry" not in info.value.response.headers


def test_upstream_500_is_a_502_the_sdk_does_not_retry(app_url: str, up: Upstream) -> None:
    up.script({"status": 500, "body": f'{{"error": {{"message": "boom, key {KEY} leaked"}}}}'})
    retrying = sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=2))
    with pytest.raises(openai.InternalServerError) as info:
        retrying.chat.completions.create(model="e2e-direct", messages=MESSAGES)

    assert info.value.status_code == 502
    assert info.value.response.headers["x-should-retry"] == "false"
    assert "api" in info.value.message and "500" in info.value.message
    assert KEY not in info.value.response.text
    assert len(up.calls()) == 1  # x-should-retry: false kept the SDK from re-running the request


def test_slow_upstream_is_a_504_not_a_client_timeout(impatient_app_url: str, up: Upstream) -> None:
    up.script({"content": "too late", "delay": 1.0})
    client = sdk(OpenAI(base_url=f"{impatient_app_url}/v1", api_key="x", max_retries=0, timeout=10))
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="e2e-direct", messages=MESSAGES)

    assert not isinstance(info.value, openai.APITimeoutError)
    assert info.value.status_code == 504
    assert info.value.code == "upstream_timeout"
    assert info.value.response.headers["x-should-retry"] == "false"


# -- standalone start-up ---------------------------------------------------------------------------


def test_without_config_the_demo_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADAPTER_CRITIC_CONFIG", raising=False)
    with run_server(UVICORN) as (url, proc):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0))
        answers = {model: client.chat.completions.create(model=model, messages=MESSAGES) for model in DEMO_MODELS}
        streamed = {
            model: "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
                if chunk.choices
            )
            for model in DEMO_MODELS
        }
        stderr = stop_server(proc)

    for model, response in answers.items():
        assert response.model == model
        assert "not a real LLM" in (response.choices[0].message.content or "")
        assert extension(response)["mode"] == demo_config().served_models[model].mode
    for model, text in streamed.items():
        assert text == answers[model].choices[0].message.content  # the demo is deterministic
    assert "advisor" in extension(answers["demo-advisor"])["intermediate"]
    assert set(extension(answers["demo-panel"])["intermediate"]["lenses"]) == {
        "correctness",
        "completeness",
        "instructions",
        "clarity",
    }
    assert extension(answers["demo-best-of-3"])["intermediate"]["chosen"] == 2
    assert extension(answers["demo-adapter"])["intermediate"]["adapter"].startswith("<<<<<<< SEARCH")
    assert "critic" in extension(answers["demo-critic"])["intermediate"]
    assert extension(answers["demo-self-consistency"])["intermediate"]["chosen_by"] == "universal"  # nothing to vote on
    assert extension(answers["demo-self-refine"])["intermediate"]["stopped"] == 2
    assert "reread" in extension(answers["demo-re2"])["intermediate"]
    assert len(extension(answers["demo-mixture-of-agents"])["intermediate"]["layers"]) == 2
    assert len(extension(answers["demo-chain-of-verification"])["intermediate"]["verifications"]) == 2
    assert "serving the built-in DEMO" in stderr
    assert "ADAPTER_CRITIC_CONFIG" in stderr


def test_relative_base_url_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "relative.toml"
    with run_app(path, direct_toml("/v1", name="x", model="m")) as (_, proc):
        returncode = proc.wait(timeout=10)
        stderr = stop_server(proc)

    assert returncode != 0
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "the server exited without saying why"
    message = lines[-1]
    assert str(path) in message
    assert "served_models.x.api.base_url" in message
    assert "AdapterCriticMiddleware" in message
    assert "Traceback" not in stderr
