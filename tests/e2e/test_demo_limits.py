"""The demo model stops where a real one would: before a stop sequence (`stop`, Anthropic `stop_sequences`, saying
which) and after `max_tokens` (`max_completion_tokens`, Anthropic `max_tokens`, Responses `max_output_tokens`) with
the protocol's length stop — in every workflow (the final answer honours them), plain and streamed."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from .demo_sdk import MODELS, chat, messages, responses

COUNTING = "Count with me: one two three four five six seven"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_openai_stop(oai: openai.OpenAI, model: str, stream: bool) -> None:
    said = chat(oai, model, COUNTING, stream=stream, stop=["three", "five"])
    assert said.text.endswith('You said: "Count with me: one two ') and "three" not in said.text
    assert said.stop == "stop"
    alone = chat(oai, model, COUNTING, stream=stream, stop="seven")
    assert alone.text.endswith("six ") and alone.stop == "stop"
    unmet = chat(oai, model, COUNTING, stream=stream, stop=["eight"])
    assert unmet.text.count('seven"') == 1 and unmet.stop == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_anthropic_stop_sequences(claude: anthropic.Anthropic, model: str, stream: bool) -> None:
    said = messages(claude, model, COUNTING, stream=stream, stop_sequences=["five", "three"])
    assert said.text.endswith("one two ") and said.stop == "stop_sequence" and said.stop_sequence == "three"
    unmet = messages(claude, model, COUNTING, stream=stream, stop_sequences=["eight"])
    assert unmet.text.count('seven"') == 1 and unmet.stop == "end_turn" and unmet.stop_sequence is None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_max_tokens_cuts_the_answer(oai: openai.OpenAI, claude: anthropic.Anthropic, model: str, stream: bool) -> None:
    # Five tokens end inside the draft's first sentence: the adapter finds nothing to edit, and every workflow's
    # answer is five words long.
    cut = chat(oai, model, COUNTING, stream=stream, max_tokens=5)
    assert len(cut.text.split()) == 5 and cut.text.startswith("Demo model") and cut.stop == "length"
    newer = chat(oai, model, COUNTING, stream=stream, max_completion_tokens=4)
    assert len(newer.text.split()) == 4 and newer.stop == "length"
    whole = chat(oai, model, COUNTING, stream=stream, max_tokens=500)
    assert whole.stop == "stop" and whole.text.count('seven"') == 1

    said = messages(claude, model, COUNTING, stream=stream, max_tokens=5)
    assert len(said.text.split()) == 5 and said.stop == "max_tokens"

    answered = responses(oai, model, COUNTING, stream=stream, max_output_tokens=5)
    assert len(answered.text.split()) == 5 and answered.stop == "max_output_tokens"


def test_max_tokens_counts_the_answers_tokens(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="demo-direct", messages=[{"role": "user", "content": COUNTING}], max_tokens=6
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 6


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_max_tokens_cuts_a_forced_tool_call(oai: openai.OpenAI, stream: bool) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    said = chat(oai, "demo-direct", "Hi", stream=stream, tools=tools, tool_choice="required", max_tokens=2)
    [(name, arguments)] = said.calls
    assert name == "get_weather" and said.stop == "length"
    with pytest.raises(json.JSONDecodeError):  # cut short, as a real model's arguments are
        json.loads(arguments)
