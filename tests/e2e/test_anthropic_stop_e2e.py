"""An Anthropic upstream's stop sequence reaches the client: its `stop_reason: "stop_sequence"` and the matched
`stop_sequence`, plain and streamed, to the official `anthropic` SDK (and to an OpenAI client as vLLM's choice
`stop_reason`), through real `uvicorn adapter_critic.asgi:app` in front of the scripted upstream's Messages
endpoint (a real server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from ..conftest import RemoteUpstream as Upstream
from ..conftest import run_app, sdk

QUESTION: list[Any] = [{"role": "user", "content": "Count to five, then say END."}]


def config_toml(upstream_url: str) -> str:
    return f"""
retries = 0
default_api_key_env = "NO_KEY"

[served_models.claude-direct]
mode = "direct"
api = {{ model = "claude-model", base_url = "{upstream_url}/v1", protocol = "anthropic" }}

[served_models.claude-critic]
mode = "critic"
api = {{ model = "claude-model", base_url = "{upstream_url}/v1", protocol = "anthropic" }}
critic = {{ model = "critic-model", base_url = "{upstream_url}/v1" }}
"""


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("stop") / "stop.toml"
    with run_app(path, config_toml(upstream_url)) as (url, _):
        yield url


def stopped_at_end(up: Upstream, model: str) -> None:
    """The scripted answers: the final call to claude-model stops at the sequence `END`."""
    final = {"content": "one two three four five ", "model": "claude-model", "choice_extra": {"stop_reason": "END"}}
    if model == "claude-critic":
        up.script(
            {"content": "one two", "model": "claude-model"},
            {"content": "Count all five.", "model": "critic-model"},
            final,
        )
    else:
        up.script(final)


@pytest.mark.parametrize("model", ["claude-direct", "claude-critic"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_anthropic_sdk_gets_the_upstreams_stop_sequence(
    app_url: str, up: Upstream, model: str, stream: bool
) -> None:
    stopped_at_end(up, model)
    client = sdk(anthropic.Anthropic(base_url=app_url, api_key="unused", max_retries=0))
    ask: Any = {"model": model, "max_tokens": 100, "messages": QUESTION, "stop_sequences": ["END"]}
    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)
    assert message.content[0].type == "text" and message.content[0].text == "one two three four five "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")
    final = [call for call in up.calls() if call["path"].endswith("/messages")][-1]
    assert final["body"]["stop_sequences"] == ["END"]


def test_an_answer_that_ended_its_turn_has_no_stop_sequence(app_url: str, up: Upstream) -> None:
    up.script({"content": "one two three four five", "model": "claude-model"})
    client = sdk(anthropic.Anthropic(base_url=app_url, api_key="unused", max_retries=0))
    message = client.messages.create(model="claude-direct", max_tokens=100, messages=QUESTION, stop_sequences=["END"])
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_openai_client_gets_the_stop_sequence_as_vllm_says_it(app_url: str, up: Upstream, stream: bool) -> None:
    stopped_at_end(up, "claude-direct")
    client = sdk(openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0))
    if stream:
        chunks = list(
            client.chat.completions.create(model="claude-direct", messages=QUESTION, stop=["END"], stream=True)
        )
        [finish] = [choice for chunk in chunks for choice in chunk.choices if choice.finish_reason is not None]
    else:
        completion = client.chat.completions.create(model="claude-direct", messages=QUESTION, stop=["END"])
        finish = completion.choices[0]
    assert finish.finish_reason == "stop"
    assert (finish.model_extra or {}).get("stop_reason") == "END"
