"""Anthropic Messages end to end: real `uvicorn adapter_critic.asgi:app` subprocesses in front of the scripted
upstream running as a real server.

- the scripted upstream's Messages endpoint as the Claude critic of a critic run, plain and streamed;
- the official `anthropic` SDK as the client of `/v1/messages`: plain, `messages.stream(...)`, tool use, and
  errors raising the SDK's exception classes;
- a chain: the back server's `/v1/messages` is the `protocol = "anthropic"` upstream of the front server.

The servers start once per module; each test resets the upstream's script and recorded calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ..conftest import RemoteUpstream as Upstream
from ..conftest import run_app, sdk

INBOUND_KEY = "in-key-e2e"
CLAUDE_KEY = "sk-ant-e2e"
QUESTION = [{"role": "user", "content": "Where is the Eiffel Tower?"}]


def back_config(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
retries = 0
auth_api_keys_env = "INBOUND_KEYS"

[served_models.a-critic]
mode = "critic"
api = {{ model = "local-model", base_url = "{up}", api_key_env = "LOCAL_KEY" }}
critic = {{ model = "claude-critic", base_url = "{up}", protocol = "anthropic", api_key_env = "CLAUDE_KEY" }}

[served_models.a-direct]
mode = "direct"
api = {{ model = "back-model", base_url = "{up}", api_key_env = "LOCAL_KEY" }}
"""


def front_config(upstream_url: str, back_url: str) -> str:
    back = {"base_url": f"{back_url}/v1", "protocol": "anthropic", "api_key_env": "BACK_KEY"}
    critic = ", ".join(f"{key} = {json.dumps(value)}" for key, value in {"model": "a-direct", **back}.items())
    api = ", ".join(f"{key} = {json.dumps(value)}" for key, value in {"model": "a-critic", **back}.items())
    return f"""
retries = 0
default_api_key_env = "NO_KEY"

[served_models.front-critic]
mode = "critic"
api = {{ model = "front-model", base_url = "{upstream_url}/v1" }}
critic = {{ {critic} }}

[served_models.front-direct]
mode = "direct"
api = {{ {api} }}
"""


@pytest.fixture(scope="module")
def back_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("anthropic") / "back.toml"
    env = {"INBOUND_KEYS": INBOUND_KEY, "CLAUDE_KEY": CLAUDE_KEY, "LOCAL_KEY": ""}
    with run_app(path, back_config(upstream_url), **env) as (url, _):
        yield url


@pytest.fixture(scope="module")
def front_url(upstream_url: str, back_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("anthropic") / "front.toml"
    with run_app(path, front_config(upstream_url, back_url), BACK_KEY=INBOUND_KEY) as (url, _):
        yield url


@pytest.fixture
def claude(back_url: str) -> anthropic.Anthropic:
    return sdk(anthropic.Anthropic(base_url=back_url, api_key=INBOUND_KEY, max_retries=0))


def critic_script(up: Upstream) -> None:
    up.script(
        {"content": "It is in Lyon.", "model": "local-model"},
        {"content": "Wrong city: it is in Paris.", "model": "claude-critic"},
        {"content": "The Eiffel Tower is in Paris.", "model": "local-model"},
    )


def anthropic_calls(up: Upstream) -> list[dict[str, Any]]:
    return [call for call in up.calls() if call["path"].endswith("/messages")]


# -- the scripted Messages upstream as the critic ---------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_scripted_claude_is_the_critic_of_a_critic_run(back_url: str, up: Upstream, stream: bool) -> None:
    critic_script(up)
    client = sdk(openai.OpenAI(base_url=f"{back_url}/v1", api_key=INBOUND_KEY, max_retries=0))
    if stream:
        chunks = list(client.chat.completions.create(model="a-critic", messages=QUESTION, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].model_extra is not None
        ext = chunks[-1].model_extra["adapter_critic"]
    else:
        completion = client.chat.completions.create(model="a-critic", messages=QUESTION)
        text = completion.choices[0].message.content or ""
        assert completion.model_extra is not None
        ext = completion.model_extra["adapter_critic"]
    assert text == "The Eiffel Tower is in Paris."
    assert ext["intermediate"]["critic"] == "Wrong city: it is in Paris."
    assert ext["tokens"]["stages"]["critic"]["prompt_tokens"] == 10  # the scripted Messages usage, read back
    [call] = anthropic_calls(up)
    assert call["path"] == "/v1/messages"
    assert call["headers"]["x-api-key"] == CLAUDE_KEY and call["headers"]["anthropic-version"] == "2023-06-01"


# -- the anthropic SDK as the client of /v1/messages ------------------------------------------------------


def test_the_sdk_creates_a_message(claude: anthropic.Anthropic, up: Upstream) -> None:
    critic_script(up)
    message = claude.messages.create(model="a-critic", max_tokens=300, messages=QUESTION)
    assert message.content[0].type == "text" and message.content[0].text == "The Eiffel Tower is in Paris."
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 12 and message.usage.output_tokens == 9  # 1 + 10 + 1 in, 2 + 5 + 2 out
    assert message.model_extra is not None
    assert message.model_extra["adapter_critic"]["intermediate"]["critic"] == "Wrong city: it is in Paris."
    assert message._request_id == message.id


def test_the_sdk_streams_a_message(claude: anthropic.Anthropic, up: Upstream) -> None:
    critic_script(up)
    with claude.messages.stream(model="a-critic", max_tokens=300, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "The Eiffel Tower is in Paris."
    assert final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 9


def usage_events(client: anthropic.Anthropic, model: str, up: Upstream | None = None) -> tuple[Any, Any]:
    """The usage of a streamed answer's `message_start` and of its `message_delta`, as the SDK reads them; with
    `up`, the upstream is resumed (`stream_pause_after`) once `message_start` was read."""
    events: list[Any] = []
    for event in client.messages.create(model=model, max_tokens=300, messages=QUESTION, stream=True):
        events.append(event)
        if up is not None and event.type == "message_start":
            up.resume()
    [start] = [event for event in events if event.type == "message_start"]
    [delta] = [event for event in events if event.type == "message_delta"]
    return start.message.usage, delta.usage


def test_message_start_carries_the_input_tokens_of_the_stages_before_the_answer(
    claude: anthropic.Anthropic, up: Upstream
) -> None:
    # The second pass's upstream sends its role and first text, then holds the rest (its usage chunk with it) until
    # `message_start` was read: the answer starts before that call's usage is known.
    up.script(
        {"content": "It is in Lyon.", "model": "local-model"},
        {"content": "Wrong city: it is in Paris.", "model": "claude-critic"},
        {"content": "The Eiffel Tower is in Paris.", "model": "local-model", "stream_pause_after": 2},
    )
    start, delta = usage_events(claude, "a-critic", up)

    # The draft's (1) and the Claude critique's (10) are known before the answer starts; the second pass's own (1)
    # is not yet.
    assert start.input_tokens == 11
    assert (delta.input_tokens, delta.output_tokens) == (12, 9)  # the totals, at the end


def test_message_start_carries_the_final_calls_input_when_its_upstream_reports_it_first(
    claude: anthropic.Anthropic, up: Upstream
) -> None:
    # The second pass's upstream reports its usage on every chunk (vLLM's `continuous_usage_stats`): its input is
    # known with its first text.
    up.script(
        {"content": "It is in Lyon.", "model": "local-model"},
        {"content": "Wrong city: it is in Paris.", "model": "claude-critic"},
        {"content": "The Eiffel Tower is in Paris.", "model": "local-model", "stream_usage": "every_chunk"},
    )
    start, delta = usage_events(claude, "a-critic")

    assert start.input_tokens == 12
    assert (delta.input_tokens, delta.output_tokens) == (12, 9)


def test_the_sdk_uses_a_tool_and_sends_its_result(claude: anthropic.Anthropic, up: Upstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    up.script({"content": None, "tool_calls": [call], "finish_reason": "tool_calls"}, {"content": "It is 18C."})
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    with claude.messages.stream(model="a-direct", max_tokens=300, messages=ask, tools=tools) as stream:
        first = stream.get_final_message()
    [use] = first.content
    assert use.type == "tool_use" and (use.id, use.name, use.input) == ("call_1", "get_weather", {"city": "Paris"})
    assert first.stop_reason == "tool_use"
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "18C"}
    conversation = [*ask, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}]
    second = claude.messages.create(model="a-direct", max_tokens=300, messages=conversation, tools=tools)
    assert second.content[0].type == "text" and second.content[0].text == "It is 18C."
    sent = up.calls()[-1]["body"]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_1"
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "18C"}


def test_errors_raise_the_sdks_exception_classes(claude: anthropic.Anthropic, back_url: str, up: Upstream) -> None:
    with pytest.raises(anthropic.NotFoundError) as not_found:
        claude.messages.create(model="not-served", max_tokens=10, messages=QUESTION)
    assert "not-served" in not_found.value.message
    stranger = sdk(anthropic.Anthropic(base_url=back_url, api_key="wrong", max_retries=0))
    with pytest.raises(anthropic.AuthenticationError):
        stranger.messages.create(model="a-direct", max_tokens=10, messages=QUESTION)
    up.script({"status": 400, "body": '{"error": {"message": "context too long", "type": "invalid_request_error"}}'})
    with pytest.raises(anthropic.BadRequestError, match="context too long"):
        claude.messages.create(model="a-direct", max_tokens=10, messages=QUESTION)
    up.script({"status": 429, "body": '{"error": {"message": "slow down"}}', "headers": {"retry-after": "3"}})
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="a-direct", max_tokens=10, messages=QUESTION)
    assert limited.value.response.headers["retry-after"] == "3"
    up.script({"status": 500, "body": '{"error": {"message": "boom"}}'})
    with pytest.raises(anthropic.InternalServerError):
        claude.messages.create(model="a-direct", max_tokens=10, messages=QUESTION)


def test_a_failure_mid_stream_raises_in_the_sdk(claude: anthropic.Anthropic, up: Upstream) -> None:
    up.script({"content": "A long answer cut short", "stream_break_after": 3, "stream_error": {"message": "gone"}})
    with (
        pytest.raises(anthropic.APIStatusError, match="gone"),
        claude.messages.stream(model="a-direct", max_tokens=10, messages=QUESTION) as stream,
    ):
        "".join(stream.text_stream)


# -- a chain: one server's /v1/messages as another's anthropic upstream -----------------------------------


def test_one_servers_messages_route_is_anothers_claude_critic(front_url: str, up: Upstream) -> None:
    up.script(
        {"content": "Draft.", "model": "front-model"},
        {"content": "Critique from the back server.", "model": "back-model"},
        {"content": "Final.", "model": "front-model"},
    )
    client = sdk(openai.OpenAI(base_url=f"{front_url}/v1", api_key="x", max_retries=0))
    completion = client.chat.completions.create(model="front-critic", messages=QUESTION)
    assert completion.model_extra is not None
    ext = completion.model_extra["adapter_critic"]
    assert completion.choices[0].message.content == "Final.", ext
    assert ext["intermediate"]["critic"] == "Critique from the back server."
    assert ext["tokens"]["stages"]["critic"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    back_call = next(call for call in up.calls() if call["body"]["model"] == "back-model")
    assert back_call["body"]["messages"][0]["role"] == "system"  # the critic prompt went through as `system`


def test_a_chain_streams_the_back_servers_critic_run(front_url: str, up: Upstream) -> None:
    critic_script(up)
    with httpx.stream(
        "POST",
        f"{front_url}/v1/chat/completions",
        json={"model": "front-direct", "messages": QUESTION, "stream": True, "stream_options": {"include_usage": True}},
        timeout=30,
    ) as response:
        lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "The Eiffel Tower is in Paris."
    assert chunks[-1]["usage"]["completion_tokens"] == 9  # the back server's whole run, as its usage said
