"""The built-in demo served by `adapter_critic.asgi` when `ADAPTER_CRITIC_CONFIG` is unset (SPEC §1.3)."""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapter_critic.demo import ADAPTER_EDIT, CRITIQUE, DEMO_MODEL, DRAFT_LEAD, REVISED_LEAD, demo_config
from adapter_critic.demo.answers import REFINED_LEAD, REREAD_LEAD

from ..conftest import asgi_client, chat

pytestmark = pytest.mark.anyio

DEMO_MODELS = list(demo_config().served_models)


@pytest.fixture
async def demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.delenv("ADAPTER_CRITIC_CONFIG", raising=False)
    asgi = importlib.import_module("adapter_critic.asgi")
    capsys.readouterr()
    caplog.clear()
    app = asgi.standalone_app()
    # Logged when logging is configured (as under pytest), else printed to stderr.
    said = capsys.readouterr().err + caplog.text
    assert "DEMO" in said
    assert "ADAPTER_CRITIC_CONFIG" in said
    async with asgi_client(app) as client:
        yield client


async def ask(client: httpx.AsyncClient, model: str, content: str = "What is 2 + 2?") -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=chat(model, content))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["model"] == model
    return body


def answer(body: dict[str, Any]) -> str:
    content: str = body["choices"][0]["message"]["content"]
    return content


async def test_demo_lists_its_models(demo: httpx.AsyncClient) -> None:
    models = (await demo.get("/v1/models")).json()
    assert (
        [m["id"] for m in models["data"]]
        == DEMO_MODELS
        == [
            "demo-direct",
            "demo-adapter",
            "demo-critic",
            "demo-advisor",
            "demo-panel",
            "demo-best-of-3",
            "demo-self-consistency",
            "demo-self-refine",
            "demo-re2",
            "demo-mixture-of-agents",
            "demo-chain-of-verification",
            "demo-auto",
        ]
    )


async def test_demo_direct_answers_with_the_demo_model(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-direct", "What  is\n2 + 2?")
    assert answer(body) == f'{DRAFT_LEAD}\nYou said: "What is 2 + 2?"'
    assert "not a real LLM" in answer(body)
    assert body["adapter_critic"]["mode"] == "direct"
    assert body["usage"]["total_tokens"] > 0


async def test_demo_adapter_edits_the_draft(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-adapter")
    ext = body["adapter_critic"]
    assert ext["mode"] == "adapter"
    assert ext["intermediate"]["api_draft"].startswith(DRAFT_LEAD)
    assert "SEARCH" in ext["intermediate"]["adapter"]
    assert answer(body).startswith(ADAPTER_EDIT)
    assert answer(body) != ext["intermediate"]["api_draft"]
    assert ext["intermediate"]["final"] == answer(body)
    assert "adapter_rejection_reason" not in ext["intermediate"]
    assert set(ext["tokens"]["stages"]) == {"api", "adapter"}


async def test_demo_critic_revises_the_draft(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-critic")
    ext = body["adapter_critic"]
    assert ext["mode"] == "critic"
    assert ext["intermediate"]["api_draft"].startswith(DRAFT_LEAD)
    assert ext["intermediate"]["critic"] == CRITIQUE
    assert answer(body).startswith(REVISED_LEAD)
    assert 'You said: "What is 2 + 2?"' in answer(body)
    assert ext["intermediate"]["final"] == answer(body)
    assert set(ext["tokens"]["stages"]) == {"api_draft", "critic", "api_final"}


async def test_demo_is_plainly_named(demo: httpx.AsyncClient) -> None:
    assert "demo" in DEMO_MODEL
    for model in DEMO_MODELS:
        body = await ask(demo, model)
        assert "demo" in body["model"]
        assert answer(body).startswith("Demo model")
        assert "not a real LLM" in answer(body)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.mark.parametrize("model", DEMO_MODELS)
async def test_demo_calls_a_tool_the_user_names(demo: httpx.AsyncClient, model: str) -> None:
    body = chat(model, "Please use get_weather for Paris.", tools=[WEATHER_TOOL])
    response = await demo.post("/v1/chat/completions", json=body)
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) == {"city"}


async def test_demo_answers_in_text_without_a_named_tool_and_streams_tool_calls(demo: httpx.AsyncClient) -> None:
    plain = await demo.post("/v1/chat/completions", json=chat("demo-direct", "Hello", tools=[WEATHER_TOOL]))
    assert plain.json()["choices"][0]["finish_reason"] == "stop"
    body = chat("demo-direct", "get_weather, please", tools=[WEATHER_TOOL], stream=True)
    streamed = await demo.post("/v1/chat/completions", json=body)
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    calls = [c for chunk in chunks if chunk["choices"] for c in chunk["choices"][0]["delta"].get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "rank": {"type": "integer"}, "tags": {"type": "array"}},
    "required": ["city", "rank", "tags"],
}


@pytest.mark.parametrize("model", DEMO_MODELS)
@pytest.mark.parametrize(
    "response_format",
    [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA}}],
    ids=["json_object", "json_schema"],
)
async def test_demo_answers_valid_json_when_asked(
    demo: httpx.AsyncClient, model: str, response_format: dict[str, Any]
) -> None:
    body = chat(model, "Where is the Eiffel Tower?", response_format=response_format)
    content = (await demo.post("/v1/chat/completions", json=body)).json()["choices"][0]["message"]["content"]
    value = json.loads(content)  # every stage's edit or revision kept it valid JSON
    assert isinstance(value, dict)
    if response_format["type"] == "json_schema":
        assert set(value) == {"city", "rank", "tags"}
        assert isinstance(value["city"], str) and isinstance(value["rank"], int) and isinstance(value["tags"], list)


async def test_demo_direct_answers_every_choice_of_n(demo: httpx.AsyncClient) -> None:
    body = {**chat("demo-direct", "Hi"), "n": 3}
    plain = (await demo.post("/v1/chat/completions", json=body)).json()
    assert [c["index"] for c in plain["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"].startswith(DRAFT_LEAD) for c in plain["choices"])
    assert plain["usage"]["completion_tokens"] == 3 * len(plain["choices"][0]["message"]["content"].split())

    streamed = await demo.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [json.loads(e[6:]) for e in streamed.text.split("\n\n") if e.startswith("data: {")]
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
            if choice["finish_reason"]:
                finishes[choice["index"]] = choice["finish_reason"]
    assert texts == {i: plain["choices"][0]["message"]["content"] for i in range(3)}
    assert finishes == {0: "stop", 1: "stop", 2: "stop"}


async def test_demo_self_consistency_outvotes_a_wrong_first_sample(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-self-consistency", "What is 17 * 23?")
    intermediate = body["adapter_critic"]["intermediate"]
    # The demo model slips on seeds 1 and 4; seeds 2, 3 and 5 get it right.
    assert intermediate["answers"] == ["392", "391", "391", "395", "391"]
    assert intermediate["votes"] == {"392": 1, "391": 3, "395": 1}
    assert intermediate["chosen"] == 1 and intermediate["chosen_by"] == "majority"
    assert answer(body).startswith(DRAFT_LEAD) and "\\boxed{391}" in answer(body)
    assert list(body["adapter_critic"]["tokens"]["stages"]) == [f"sample:{i}" for i in range(1, 6)]


async def test_demo_self_consistency_asks_which_sample_is_most_consistent(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-self-consistency", "What is the capital of Australia?")
    intermediate = body["adapter_critic"]["intermediate"]
    assert intermediate["answers"] == [None] * 5 and intermediate["votes"] == {}  # no \boxed{} answer to vote on
    assert intermediate["consistency"].startswith("The most consistent response is Response 3")
    assert intermediate["chosen"] == 2 and intermediate["chosen_by"] == "universal"
    assert answer(body).endswith("(Demo candidate sampled with seed 3.)")


async def test_demo_self_refine_stops_when_its_feedback_needs_no_change(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-self-refine")
    ext = body["adapter_critic"]
    assert ext["intermediate"]["api_draft"].startswith(DRAFT_LEAD)
    assert ext["intermediate"]["feedback:1"].startswith("- The reply does not say that it was refined")
    assert ext["intermediate"]["refine:1"] == answer(body) == ext["intermediate"]["final"]
    assert answer(body).startswith(REFINED_LEAD) and 'You said: "What is 2 + 2?"' in answer(body)
    assert ext["intermediate"]["feedback:2"].endswith("**NO CHANGES NEEDED**")
    assert ext["intermediate"]["stopped"] == 2
    assert list(ext["tokens"]["stages"]) == ["api_draft", "feedback:1", "refine:1", "feedback:2"]


async def test_demo_re2_reads_the_question_twice(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-re2")
    assert answer(body) == f'{REREAD_LEAD}\nYou said: "What is 2 + 2?"'
    assert body["adapter_critic"]["intermediate"]["reread"] == "Read the question again: What is 2 + 2?"
