"""The advisor workflow (issue 12): guidance first, then the API model answers with it appended to the last user
message; the advisor's failure degrades to a plain answer; the final call streams live."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter_critic.workflows.advice import DEFAULT_ADVISOR_SYSTEM_PROMPT, GUIDANCE_CLOSE, GUIDANCE_OPEN

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import post
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL, "options": {"temperature": 0.1}}
ADVISOR = {"model": "advisor-model", "base_url": UPSTREAM_URL, "options": {"max_tokens": 99}}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def advisor_config(**served: Any) -> Any:
    return make_config(served_models={"m": {"mode": "advisor", "api": API, "advisor": ADVISOR, **served}})


async def test_advisor_guides_the_api_call(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(
            "- Look it up.\n- Answer in one line.",
            model="advisor-model",
            usage={"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        ),
        Reply("Paris.", model="api-model", usage={"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}),
    )
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?", "name": "u1"},
        {"role": "assistant", "content": "Which country again?"},
        {"role": "user", "content": "France.", "x_vendor": {"keep": True}},
    ]
    body = {"model": "m", "messages": messages, "tools": [TOOL], "temperature": 0.7}
    async with serve(advisor_config()) as client:
        data = await post(client, body)
    advisor, api = upstream.calls
    assert [advisor.model, api.model] == ["advisor-model", "api-model"]
    # The advisor: its own prompt and options, the whole conversation, none of the request's options.
    assert advisor.messages[0] == {"role": "system", "content": DEFAULT_ADVISOR_SYSTEM_PROMPT}
    assert "Capital of France?" in advisor.messages[1]["content"] and "France." in advisor.messages[1]["content"]
    assert advisor.body["max_tokens"] == 99 and "tools" not in advisor.body and "temperature" not in advisor.body
    # The API call: the request's options, every message as sent but the last user one, which gets the block.
    assert api.body["tools"] == [TOOL] and api.body["temperature"] == 0.7
    assert api.messages[:3] == messages[:3]
    last = api.messages[3]
    assert last["x_vendor"] == {"keep": True} and last["role"] == "user"
    assert last["content"].startswith("France.\n\n" + GUIDANCE_OPEN)
    assert last["content"].endswith("- Look it up.\n- Answer in one line.\n" + GUIDANCE_CLOSE)
    ext = data["adapter_critic"]
    assert ext["mode"] == "advisor"
    assert ext["intermediate"] == {"advisor": "- Look it up.\n- Answer in one line.", "final": "Paris."}
    assert list(ext["tokens"]["stages"]) == ["advisor", "api"]
    assert data["usage"] == ext["tokens"]["total"] == {"prompt_tokens": 16, "completion_tokens": 9, "total_tokens": 25}
    assert data["choices"][0]["message"]["content"] == "Paris."


async def test_guidance_is_a_text_part_of_a_list_content(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Hint.", model="advisor-model"))
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    async with serve(advisor_config()) as client:
        await post(client, {"model": "m", "messages": [{"role": "user", "content": parts}]})
    content = upstream.calls[1].messages[0]["content"]
    assert content[:2] == parts
    assert content[2]["type"] == "text" and "Hint." in content[2]["text"] and GUIDANCE_OPEN in content[2]["text"]


async def test_a_failed_advisor_degrades_to_a_plain_answer(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=500, body='{"error": {"message": "down"}}', model="advisor-model"))
    async with serve(advisor_config()) as client:
        data = await post(client, chat("m", "Hi"))
    assert upstream.calls[1].messages == [{"role": "user", "content": "Hi"}]  # no guidance block
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert "advisor" in ext["intermediate"]["advisor_error"] and "advisor" not in ext["intermediate"]
    assert list(ext["tokens"]["stages"]) == ["advisor", "api"]


async def test_a_failed_advisor_fails_the_request_when_asked(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=500, body='{"error": {"message": "down"}}', model="advisor-model"))
    async with serve(advisor_config(on_review_error="fail")) as client:
        data = await post(client, chat("m"), status=502)
    assert "advisor" in data["error"]["message"]
    assert len(upstream.calls) == 1


async def test_the_advisor_falls_back_to_the_api_target(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    config = make_config(served_models={"m": {"mode": "advisor", "api": API}})
    async with serve(config) as client:
        await post(client, chat("m"))
    assert [call.model for call in upstream.calls] == ["api-model", "api-model"]
    assert upstream.calls[0].body["temperature"] == 0.1  # the API target's own options, as the advisor's target


async def test_the_answer_streams_live_with_the_extension_last(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Hint.", model="advisor-model"), Reply("A longer streamed answer.", model="api-model"))
    async with serve(advisor_config()) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"] and c["choices"][0]["delta"]]
    # The upstream's own pieces (8 characters each) are relayed as they come, not one synthesised chunk.
    assert [d for d in deltas if d] == ["A longer", " streame", "d answer", "."]
    assert upstream.calls[1].body["stream"] is True and "stream" not in upstream.calls[0].body
    ext = chunks[-1]["adapter_critic"]
    assert ext["intermediate"]["advisor"] == "Hint." and ext["intermediate"]["final"] == "A longer streamed answer."
    assert response.text.endswith("data: [DONE]\n\n")


async def test_requests_override_the_mode_and_the_new_stage_targets(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    critic = {"mode": "critic", "api": API, "critic": {"model": "critic-model", "base_url": UPSTREAM_URL}}
    config = make_config(served_models={"m": {"mode": "advisor", "api": API, "advisor": ADVISOR}, "c": critic})
    async with serve(config) as client:
        await post(client, chat("m", x_adapter_critic={"advisor_model": "other-advisor"}))
        await post(client, chat("c", x_adapter_critic={"mode": "advisor"}))
        await post(
            client,
            chat("m", x_adapter_critic={"mode": "best_of_n", "judge_model": "judge-2", "judge_base_url": UPSTREAM_URL}),
        )
        error = await post(client, chat("m", x_adapter_critic={"coordinator_base_url": "http://evil.test/v1"}), 400)
    assert [call.model for call in upstream.calls[:4]] == ["other-advisor", "api-model", "api-model", "api-model"]
    assert [call.model for call in upstream.calls[4:]] == ["api-model"] * 3 + ["judge-2"] * 4
    assert error["error"]["param"] == "x_adapter_critic.coordinator_base_url"
