"""End to end: the official `openai` SDK's Responses client against real `uvicorn adapter_critic.asgi:app`, in front
of the scripted upstream running as a real server — plain, streamed (typed events, and the SDK's `stream()` helper
that checks the event sequence as it accumulates it), a function tool call round trip and an unknown model, for a
`direct` and a `critic` served model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseTextDeltaEvent,
)

from ..conftest import UVICORN, run_server, sdk
from ..conftest import RemoteUpstream as Upstream
from ..helpers import extension
from .test_e2e import start_app

MODELS = ["e2e-direct", "e2e-critic"]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_app(upstream_url, tmp_path_factory.mktemp("responses"), "responses") as (url, _):
        yield url


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))


def script(up: Upstream, model: str, *final: dict[str, Any]) -> None:
    """`final` replies as the served model's answers (in critic mode after a draft and a critique each)."""
    replies: list[dict[str, Any]] = []
    for reply in final:
        if model == "e2e-critic":
            replies.append({"content": "A draft.", "model": "api-model"})
            replies.append({"content": "Be exact.", "model": "critic-model"})
        replies.append({**reply, "model": "api-model"})
    up.script(*replies)


@pytest.mark.parametrize("model", MODELS)
def test_a_plain_response(client: OpenAI, up: Upstream, model: str) -> None:
    script(up, model, {"content": "The Eiffel Tower is in Paris."})
    response = client.responses.create(
        model=model, input="Where is the Eiffel Tower?", instructions="Answer in one sentence.", metadata={"k": "v"}
    )
    assert response.output_text == "The Eiffel Tower is in Paris."
    assert response.id.startswith("resp_") and response.model == model and response.status == "completed"
    assert response.metadata == {"k": "v"}
    assert response.usage is not None and response.usage.total_tokens == (9 if model == "e2e-critic" else 3)
    ext = extension(response)
    assert ext["mode"] == model.removeprefix("e2e-")
    if model == "e2e-critic":
        assert ext["intermediate"]["api_draft"] == "A draft." and ext["intermediate"]["critic"] == "Be exact."
    first = up.calls()[0]["body"]
    assert first["messages"][0] == {"role": "system", "content": "Answer in one sentence."}


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_response_is_typed_events(client: OpenAI, up: Upstream, model: str) -> None:
    script(up, model, {"content": "The Eiffel Tower is in Paris."})
    events = list(client.responses.create(model=model, input="Where is the Eiffel Tower?", stream=True))
    assert isinstance(events[0], ResponseCreatedEvent) and isinstance(events[-1], ResponseCompletedEvent)
    deltas = [event.delta for event in events if isinstance(event, ResponseTextDeltaEvent)]
    assert "".join(deltas) == "The Eiffel Tower is in Paris." and len(deltas) > 1
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "The Eiffel Tower is in Paris."
    assert final.usage is not None and final.usage.total_tokens == (9 if model == "e2e-critic" else 3)
    assert extension(final)["mode"] == model.removeprefix("e2e-")

    script(up, model, {"content": "Paris."})
    with client.responses.stream(model=model, input="Where?") as stream:  # the SDK's accumulating helper
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        accumulated = stream.get_final_response()
    assert "".join(texts) == "Paris." and accumulated.output_text == "Paris."


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("streamed", [False, True])
def test_a_function_tool_call_round_trip(client: OpenAI, up: Upstream, model: str, streamed: bool) -> None:
    script(up, model, {"content": None, "tool_calls": [CALL], "finish_reason": "tool_calls"}, {"content": "Sunny."})
    conversation: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    if streamed:
        with client.responses.stream(model=model, input=conversation, tools=[WEATHER]) as stream:
            first = stream.get_final_response()
    else:
        first = client.responses.create(model=model, input=conversation, tools=[WEATHER])  # type: ignore[arg-type]
    [call] = [item for item in first.output if isinstance(item, ResponseFunctionToolCall)]
    assert (call.call_id, call.name, json.loads(call.arguments)) == ("call_w1", "get_weather", {"city": "Paris"})
    assert not [item for item in first.output if isinstance(item, ResponseOutputMessage)]

    conversation += first.output
    conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'})
    second = client.responses.create(model=model, input=conversation, tools=[WEATHER])  # type: ignore[arg-type]
    assert second.output_text == "Sunny."
    api_calls = [c["body"] for c in up.calls() if c["body"]["model"] == "api-model"]
    assert api_calls[0]["tools"][0]["function"]["name"] == "get_weather"
    sent = api_calls[-1]["messages"]  # the second request's final call, as the upstream got it
    assert sent[:3] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_w1", "content": '{"sky": "sunny"}'},
    ]


def test_an_unknown_model_is_not_found_and_state_is_refused(client: OpenAI, up: Upstream) -> None:
    model = "not-served"
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=model, input="Hi")
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=model, input="Hi", stream=True)
    with pytest.raises(openai.BadRequestError) as stateful:
        client.responses.create(model="e2e-direct", input="Hi", previous_response_id="resp_1")
    assert "keeps no responses" in stateful.value.message
    assert up.calls() == []


def test_the_standalone_server_serves_it_under_v1_only(app_url: str, up: Upstream) -> None:
    client = sdk(OpenAI(base_url=app_url, api_key="x", max_retries=0))
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="e2e-direct", input="Hi")


def test_the_readme_example_against_the_demo() -> None:
    env = {"ADAPTER_CRITIC_CONFIG": ""}
    with run_server(UVICORN, env) as (url, _):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        response = client.responses.create(model="demo-critic", input="Hello!", instructions="Answer briefly.")
        assert "revised after the demo critic's review" in response.output_text
        assert extension(response)["intermediate"]["critic"]
        with client.responses.stream(model="demo-critic", input="Hello!") as stream:
            deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert "".join(deltas) == final.output_text and len(deltas) > 1
    assert final.status == "completed" and final.usage is not None and final.usage.total_tokens > 0
    assert extension(final)["mode"] == "critic"
