"""The product in front of a real model server (issue 46): llama-cpp-python serving SmolLM2-135M-Instruct on
loopback, the app in real uvicorn with examples/smollm2.toml, the official `openai` and `anthropic` SDKs as clients.

Every workflow answers plain and streamed through the openai SDK and through the anthropic SDK; a forced tool call
and a JSON answer come from the server's grammar; a client leaving mid-stream frees the server; `count_tokens` is
counted by the server's tokenizer; a streamed stage whose upstream reports no usage is flagged; a `direct` answer is
the model's own text. A 135M model says little of use: the assertions check structure and accounting, never wording.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ..helpers import extension
from .conftest import TIMEOUT
from .llamaserver import LlamaServer

pytestmark = pytest.mark.real_model

WORKFLOWS = {
    "smollm2": "direct",
    "smollm2-adapter": "adapter",
    "smollm2-critic": "critic",
    "smollm2-advisor": "advisor",
    "smollm2-panel": "panel",
    "smollm2-best-of-n": "best_of_n",
    "smollm2-self-consistency": "self_consistency",
    "smollm2-self-refine": "self_refine",
    "smollm2-re2": "re2",
    "smollm2-moa": "mixture_of_agents",
    "smollm2-cove": "chain_of_verification",
}
QUESTION: list[Any] = [{"role": "user", "content": "What is 2 + 3?"}]
MAX_TOKENS = 12  # the answer's; review stages are capped by the config
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
}


def assert_accounted(ext: dict[str, Any], mode: str) -> None:
    """The extension's run: its mode, and usage that adds up — every stage that reported counted something, every
    stage that did not is named in `unreported` with zeros, and then (only then) the total is a lower bound."""
    assert ext["mode"] == mode
    tokens = ext["tokens"]
    unreported = tokens.get("unreported", [])
    assert tokens.get("lower_bound", False) == bool(unreported)
    assert set(unreported) <= set(tokens["stages"])
    for name, usage in tokens["stages"].items():
        if name in unreported:
            assert usage["total_tokens"] == 0, name
        else:
            assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, name
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert tokens["total"][field] == sum(usage[field] for usage in tokens["stages"].values())


# -- every workflow, both SDKs, plain and streamed ---------------------------------------------------------------


@pytest.mark.parametrize("model", WORKFLOWS)
def test_every_workflow_answers_the_openai_sdk(oai: openai.OpenAI, model: str) -> None:
    completion = oai.chat.completions.create(model=model, messages=QUESTION, max_tokens=MAX_TOKENS)
    ext = extension(completion)
    assert_accounted(ext, WORKFLOWS[model])
    assert completion.choices[0].message.content  # some text of the model's
    assert not ext["tokens"].get("unreported")  # plain calls: the server reports every call's usage
    assert completion.usage is not None
    assert completion.usage.total_tokens == ext["tokens"]["total"]["total_tokens"] > 0


@pytest.mark.parametrize("model", WORKFLOWS)
def test_every_workflow_streams_to_the_openai_sdk(oai: openai.OpenAI, model: str) -> None:
    chunks = list(oai.chat.completions.create(model=model, messages=QUESTION, max_tokens=MAX_TOKENS, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text
    assert chunks[-1].model_extra is not None
    ext = chunks[-1].model_extra["adapter_critic"]
    assert_accounted(ext, WORKFLOWS[model])
    if model == "smollm2":  # the answer's call streamed from a server that sends no usage in a stream
        assert ext["tokens"]["unreported"] == ["api"] and ext["tokens"]["lower_bound"] is True


# Every workflow's finished run, rendered as a Messages `message`.
@pytest.mark.parametrize("model", WORKFLOWS)
def test_a_workflow_answers_the_anthropic_sdk(claude: anthropic.Anthropic, model: str) -> None:
    message = claude.messages.create(model=model, max_tokens=MAX_TOKENS, messages=QUESTION)
    assert message.content[0].type == "text" and message.content[0].text
    assert message.model_extra is not None
    ext = message.model_extra["adapter_critic"]
    assert_accounted(ext, WORKFLOWS[model])
    assert message.usage.output_tokens == ext["tokens"]["total"]["completion_tokens"] > 0


@pytest.mark.parametrize("model", WORKFLOWS)
def test_every_workflow_streams_to_the_anthropic_sdk(claude: anthropic.Anthropic, model: str) -> None:
    events = list(claude.messages.create(model=model, max_tokens=MAX_TOKENS, messages=QUESTION, stream=True))
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text
    [delta] = [event for event in events if event.type == "message_delta"]
    assert delta.model_extra is not None
    ext = delta.model_extra["adapter_critic"]
    assert_accounted(ext, WORKFLOWS[model])
    assert delta.usage.output_tokens == ext["tokens"]["total"]["completion_tokens"]


# -- the model's own text -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_direct_answer_is_the_models_own_text(oai: openai.OpenAI, straight: openai.OpenAI, stream: bool) -> None:
    asked: dict[str, Any] = {"messages": QUESTION, "max_tokens": 16, "temperature": 0, "seed": 7}
    own = straight.chat.completions.create(model="smollm2", **asked).choices[0].message.content
    if stream:
        chunks = oai.chat.completions.create(model="smollm2", stream=True, **asked)
        relayed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    else:
        relayed = oai.chat.completions.create(model="smollm2", **asked).choices[0].message.content
    assert own and relayed == own


# -- what the server's grammar does: a forced tool call, a JSON answer ----------------------------------------------


def test_a_forced_tool_call_comes_back_to_the_openai_sdk(oai: openai.OpenAI) -> None:
    tool: Any = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    completion = oai.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=32,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_a_forced_tool_use_comes_back_to_the_anthropic_sdk(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="smollm2",
        max_tokens=32,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER}],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert message.stop_reason == "tool_use"
    [use] = [block for block in message.content if block.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input, dict) and isinstance(use.input["city"], str)


@pytest.mark.parametrize("model", ["smollm2", "smollm2-critic"])
def test_a_json_answer_fits_its_schema(oai: openai.OpenAI, model: str) -> None:
    # llama-cpp-python constrains `json_object` with a `schema` by a grammar (it refuses `json_schema`'s form).
    fmt: Any = {"type": "json_object", "schema": WEATHER}
    completion = oai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "A city, as JSON."}], response_format=fmt, max_tokens=32
    )
    answer = json.loads(completion.choices[0].message.content or "")
    assert isinstance(answer["city"], str)


# -- a client leaving, counting, usage -----------------------------------------------------------------------------


def test_a_client_leaving_mid_stream_frees_the_server(app_url: str, llama: LlamaServer, oai: openai.OpenAI) -> None:
    mark = llama.mark()
    long = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "max_tokens": 1500,
        "stream": True,
    }
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        client.stream("POST", f"{app_url}/v1/chat/completions", json=long) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                break  # the model is writing: leave
    # The product closed its own stream to the server, which noticed and stopped generating.
    assert llama.wait_for("Disconnected from client", after=mark, timeout=TIMEOUT), "".join(llama.log[mark:])
    completion = oai.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=4)
    assert completion.choices[0].message.content


def test_count_tokens_is_counted_by_the_servers_tokenizer(claude: anthropic.Anthropic, llama: LlamaServer) -> None:
    short = claude.messages.with_raw_response.count_tokens(model="smollm2", messages=QUESTION)
    longer: Any = [{"role": "user", "content": "What is 2 + 3? Answer in one short sentence, please."}]
    long = claude.messages.with_raw_response.count_tokens(model="smollm2", messages=longer)
    assert short.headers["x-adapter-critic-token-count"] == long.headers["x-adapter-critic-token-count"] == "upstream"
    assert 0 < short.parse().input_tokens < long.parse().input_tokens
