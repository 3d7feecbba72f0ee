"""`POST /v1/messages/count_tokens` through real uvicorn, the `anthropic` SDK's `client.messages.count_tokens(...)`
as the client: counted by the served model's API target's upstream where it can count — an Anthropic target's
own count_tokens, a vLLM-shaped and a llama.cpp-shaped `/tokenize` (the scripted upstream serves each under its own
prefix) — else estimated, and the `x-adapter-critic-token-count` header says which; errors and unknown paths under
`/messages` in Anthropic's envelope."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from ..conftest import RemoteUpstream as Upstream
from ..conftest import run_app, sdk

CLAUDE_KEY = "sk-ant-count"
INBOUND_KEY = "in-key-count"
QUESTION: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]
HEADER = "x-adapter-critic-token-count"


def config_toml(upstream_url: str) -> str:
    return f"""
retries = 0
default_api_key_env = "NO_KEY"
auth_api_keys_env = "INBOUND_KEYS"

[served_models.c-claude]
mode = "direct"
api = {{ model = "claude-model", base_url = "{upstream_url}/v1", protocol = "anthropic", api_key_env = "CLAUDE_KEY" }}

[served_models.c-claude-down]
mode = "direct"
api = {{ model = "claude-model", base_url = "{upstream_url}/broken/v1", protocol = "anthropic" }}

[served_models.c-vllm]
mode = "critic"
api = {{ model = "Qwen/Qwen3-8B", base_url = "{upstream_url}/vllm/v1" }}
critic = {{ model = "critic-model", base_url = "{upstream_url}/v1" }}

[served_models.c-llamacpp]
mode = "direct"
api = {{ model = "local", base_url = "{upstream_url}/llamacpp/v1" }}

[served_models.c-llamacpppy]
mode = "direct"
api = {{ model = "local", base_url = "{upstream_url}/llamacpppy/v1" }}

[served_models.c-openai]
mode = "direct"
api = {{ model = "gpt-model", base_url = "{upstream_url}/v1" }}
"""


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("count") / "count.toml"
    with run_app(path, config_toml(upstream_url), INBOUND_KEYS=INBOUND_KEY, CLAUDE_KEY=CLAUDE_KEY) as (url, _):
        yield url


@pytest.fixture
def claude(app_url: str) -> anthropic.Anthropic:
    return sdk(anthropic.Anthropic(base_url=app_url, api_key=INBOUND_KEY, max_retries=0))


def counted(claude: anthropic.Anthropic, model: str, **request: Any) -> tuple[int, str]:
    """The SDK's count for `model` and the header saying how it was counted."""
    raw = claude.messages.with_raw_response.count_tokens(model=model, **{"messages": QUESTION, **request})
    return raw.parse().input_tokens, raw.headers[HEADER]


def test_an_anthropic_target_counts_on_its_own_count_tokens(claude: anthropic.Anthropic, up: Upstream) -> None:
    tools: Any = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]
    conversation: Any = [*QUESTION, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Sure?"}]
    tokens, how = counted(claude, "c-claude", messages=conversation, system="Be brief.", tools=tools)

    assert (tokens, how) == (103, "upstream")  # the scripted count: 100 + 1 per message
    [call] = up.calls()
    assert call["path"] == "/v1/messages/count_tokens"
    assert call["headers"]["x-api-key"] == CLAUDE_KEY and call["headers"]["anthropic-version"] == "2023-06-01"
    # The client's request as it sent it, for the target's model.
    assert call["body"] == {"model": "claude-model", "messages": conversation, "system": "Be brief.", "tools": tools}


def test_a_vllm_target_counts_the_chat_on_its_tokenize(claude: anthropic.Anthropic, up: Upstream) -> None:
    tokens, how = counted(claude, "c-vllm", system="Be brief.")

    assert (tokens, how) == (202, "upstream")  # the scripted count: 200 + 1 per chat message (system, user)
    [call] = up.calls()
    assert call["path"] == "/vllm/tokenize"  # beside the target's /v1, where vLLM serves it
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is the Eiffel Tower?"}]
    assert call["body"] == {"model": "Qwen/Qwen3-8B", "messages": expected}


def test_a_llamacpp_target_counts_the_text_on_its_tokenize(claude: anthropic.Anthropic, up: Upstream) -> None:
    first = counted(claude, "c-llamacpp")
    again = counted(claude, "c-llamacpp", messages=[{"role": "user", "content": "one two three"}])

    assert first == (6, "upstream")  # "user: Where is the Eiffel Tower?": one scripted token per word
    assert again == (4, "upstream")
    asked = [call["body"] for call in up.calls()]
    # vLLM's form first (llama.cpp answers it with no count), then llama.cpp's, which is remembered.
    assert asked == [
        {"model": "local", "messages": QUESTION},
        {"content": "user: Where is the Eiffel Tower?"},
        {"content": "user: one two three"},
    ]


def test_a_llama_cpp_python_target_counts_the_text_on_its_extras_tokenize(
    claude: anthropic.Anthropic, up: Upstream
) -> None:
    first = counted(claude, "c-llamacpppy")
    again = counted(claude, "c-llamacpppy", messages=[{"role": "user", "content": "one two three"}])

    assert first == (12, "upstream")  # "user: Where is the Eiffel Tower?": two scripted tokens per word
    assert again == (8, "upstream")
    # It has no /tokenize (404 to both forms, not recorded): /extras/tokenize, which is remembered.
    asked = [(call["path"], call["body"]) for call in up.calls()]
    assert asked == [
        ("/llamacpppy/extras/tokenize", {"model": "local", "input": "user: Where is the Eiffel Tower?"}),
        ("/llamacpppy/extras/tokenize", {"model": "local", "input": "user: one two three"}),
    ]


def test_images_a_llamacpp_target_cannot_see_are_estimated(claude: anthropic.Anthropic, up: Upstream) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    looking: Any = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    tokens, how = counted(claude, "c-llamacpp", messages=looking)

    assert (tokens, how) == (4 + 1600, "estimate")  # "user: What is this?" counted there, the image estimated
    assert up.calls()[-1]["body"] == {"content": "user: What is this?"}


def test_an_upstream_that_cannot_count_gets_an_estimate(claude: anthropic.Anthropic, up: Upstream) -> None:
    text = "x" * 3994  # "user: " + 3994 characters: 4,000 characters, about 1,000 tokens
    first = counted(claude, "c-openai", messages=[{"role": "user", "content": text}])
    longer = counted(claude, "c-openai", messages=[{"role": "user", "content": text * 2}])

    assert first == (1000, "estimate")
    assert longer == (1999, "estimate")  # ceil(7,994 / 4)
    # /tokenize answered neither form (404): not asked again.
    assert [call["path"] for call in up.calls()] == ["/tokenize", "/tokenize"]


def test_an_anthropic_target_that_fails_to_count_gets_an_estimate(claude: anthropic.Anthropic, up: Upstream) -> None:
    tokens, how = counted(claude, "c-claude-down", messages=[{"role": "user", "content": "y" * 394}])

    assert (tokens, how) == (100, "estimate")
    assert [call["path"] for call in up.calls()] == ["/broken/v1/messages/count_tokens"]


def test_an_unknown_model_is_anthropics_not_found(claude: anthropic.Anthropic, up: Upstream) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.count_tokens(model="not-served", messages=QUESTION)

    body = info.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "not-served" in body["error"]["message"]
    assert up.calls() == []


def test_a_bad_count_request_is_anthropics_invalid_request(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.count_tokens(model="c-claude", messages=[])

    error = info.value.response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("`messages`")


@pytest.mark.parametrize(("method", "path"), [("POST", "/foo"), ("GET", "/batches"), ("POST", "/batches/x/y")])
def test_an_unknown_path_under_messages_is_anthropics_not_found(app_url: str, method: str, path: str) -> None:
    response = httpx.request(method, f"{app_url}/v1/messages{path}", headers={"x-api-key": INBOUND_KEY}, json={})

    assert response.status_code == 404
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert f"/v1/messages{path}" in body["error"]["message"]


def test_inbound_auth_answers_in_anthropics_envelope_under_messages(app_url: str) -> None:
    stranger = sdk(anthropic.Anthropic(base_url=app_url, api_key="wrong", max_retries=0))
    with pytest.raises(anthropic.AuthenticationError) as info:
        stranger.messages.count_tokens(model="c-claude", messages=QUESTION)

    assert info.value.response.json()["error"]["type"] == "authentication_error"
