"""The self_refine workflow: a draft, then feedback and refine rounds up to `max_rounds`, stopping when the feedback
says the stop phrase; the last refine is the final call (streamed live); a failed feedback or refine degrades."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter_critic import ConfigError
from adapter_critic.workflows.self_refine import DEFAULT_FEEDBACK_SYSTEM_PROMPT, REFINE_INSTRUCTION

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import post
from ..scripted_upstream import Reply, ScriptedUpstream
from ..store.runs import recording

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL, "options": {"max_tokens": 50}}
FEEDBACK = {"model": "feedback-model", "base_url": UPSTREAM_URL}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
QUESTION = [{"role": "user", "content": "Name a prime."}]


def refining(**served: Any) -> Any:
    return make_config(served_models={"m": {"mode": "self_refine", "api": API, "feedback": FEEDBACK, **served}})


def api(text: str) -> Reply:
    return Reply(text, model="api-model")


def feedback(text: str) -> Reply:
    return Reply(text, model="feedback-model")


def refine(feedback_text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": REFINE_INSTRUCTION.format(feedback=feedback_text)}]


async def test_rounds_until_the_feedback_needs_no_change(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        api("Nine."),
        feedback("- 9 = 3 x 3 is not prime."),
        api("Seven."),
        feedback("Seven is prime.\n\n**No changes needed.**"),
    )
    async with serve(refining()) as client:
        data = await post(client, chat("m", "Name a prime.", tools=[TOOL]))
    calls = upstream.calls
    assert [call.model for call in calls] == ["api-model", "feedback-model", "api-model", "feedback-model"]
    # The feedback sees the conversation and the latest answer, with its own options only.
    prompt = DEFAULT_FEEDBACK_SYSTEM_PROMPT.replace("{stop_phrase}", "NO CHANGES NEEDED")
    assert calls[1].messages[0] == {"role": "system", "content": prompt}
    assert "<reply>\nNine.\n</reply>" in calls[1].messages[1]["content"]
    assert "<reply>\nSeven.\n</reply>" in calls[3].messages[1]["content"]
    assert all("tools" not in call.body for call in (calls[1], calls[3]))
    # The refine: the conversation, the answer and the feedback on it; the request's options, as an API call.
    assert calls[2].messages == [
        *QUESTION,
        {"role": "assistant", "content": "Nine."},
        *refine("- 9 = 3 x 3 is not prime."),
    ]
    assert calls[2].body["tools"] == [TOOL] and calls[2].body["max_tokens"] == 50
    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == "Seven."
    assert ext["intermediate"] == {
        "api_draft": "Nine.",
        "feedback:1": "- 9 = 3 x 3 is not prime.",
        "refine:1": "Seven.",
        "feedback:2": "Seven is prime.\n\n**No changes needed.**",
        "stopped": 2,
        "final": "Seven.",
    }
    assert list(ext["tokens"]["stages"]) == ["api_draft", "feedback:1", "refine:1", "feedback:2"]
    assert data["usage"]["total_tokens"] == 4 * 3


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_the_last_rounds_refine_is_the_final_call(
    serve: AppFactory, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.script(api("Nine."), feedback("- not prime"), api("Fifteen."), feedback("- still not"), api("Seven."))
    async with serve(refining(max_rounds=2)) as client:
        response = await client.post("/chat/completions", json=chat("m", "Name a prime.", stream=stream))
    calls = upstream.calls
    assert len(calls) == 5  # no feedback on the last refine
    # Every answer so far and the feedback on it: the history the paper's refine sees.
    assert calls[4].messages == [
        *QUESTION,
        {"role": "assistant", "content": "Nine."},
        *refine("- not prime"),
        {"role": "assistant", "content": "Fifteen."},
        *refine("- still not"),
    ]
    assert [call.body.get("stream", False) for call in calls] == [False] * 4 + [stream]  # the last one live
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        ext = chunks[-1]["adapter_critic"]
    else:
        text, ext = response.json()["choices"][0]["message"]["content"], response.json()["adapter_critic"]
    assert text == "Seven." == ext["intermediate"]["final"]
    assert ext["intermediate"]["refine:1"] == "Fifteen." and "stopped" not in ext["intermediate"]
    assert list(ext["tokens"]["stages"])[-1] == "refine:2"


async def test_a_failed_feedback_keeps_the_answer_so_far(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        api("Nine."),
        feedback("- not prime"),
        api("Seven."),
        Reply(status=500, body='{"error": {"message": "feedback down"}}', model="feedback-model"),
    )
    async with serve(refining()) as client:
        data = await post(client, chat("m", stream=False))
    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == "Seven."
    assert ext["degraded"] is True and "feedback down" in ext["intermediate"]["feedback:2_error"]
    assert len(upstream.calls) == 4


async def test_a_failed_refine_keeps_the_answer_so_far(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        api("Nine."),
        feedback("- not prime"),
        Reply(status=500, body='{"error": {"message": "busy"}}', model="api-model"),
    )
    async with serve(refining()) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Nine."  # the draft, sent as chunks
    assert chunks[-1]["adapter_critic"]["degraded"] is True
    assert "refine:1_error" in chunks[-1]["adapter_critic"]["intermediate"]


async def test_feedback_falls_back_to_the_api_target_and_a_custom_stop_phrase(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(api("Nine."), api("```\nlooks good\n```"))
    config = make_config(
        served_models={
            "m": {
                "mode": "self_refine",
                "api": API,
                "stop_phrase": "LOOKS GOOD",
                "feedback_system_prompt": "Review it. Say {stop_phrase} when it is right.",
            }
        }
    )
    async with serve(config) as client:
        data = await post(client, chat("m"))
    calls = upstream.calls
    assert [call.model for call in calls] == ["api-model", "api-model"]
    assert calls[1].messages[0]["content"] == "Review it. Say LOOKS GOOD when it is right."
    assert "max_tokens" in calls[1].body  # the API target's own options (not the request's)
    assert data["adapter_critic"]["intermediate"]["stopped"] == 1
    assert data["choices"][0]["message"]["content"] == "Nine."


async def test_a_request_may_choose_fewer_rounds(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(api("Nine."), feedback("- not prime"), api("Seven."))
    async with serve(refining()) as client:
        data = await post(client, chat("m", x_adapter_critic={"max_rounds": 1}))
        refused = await post(client, chat("m", x_adapter_critic={"max_rounds": 6}), status=400)
    assert data["choices"][0]["message"]["content"] == "Seven."
    assert len(upstream.calls) == 3
    assert "max_rounds" in refused["error"]["message"]


@pytest.mark.parametrize(("settings", "named"), [({"max_rounds": 0}, "max_rounds"), ({"stop_phrase": " "}, "stop")])
def test_settings_are_validated(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        refining(**settings)


async def test_every_round_is_in_the_run_store(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(api("Nine."), feedback("- not prime"), api("Seven."), feedback("NO CHANGES NEEDED"))
    top = {"served_models": {"m": {"mode": "self_refine", "api": API, "feedback": FEEDBACK}}}
    async with recording(upstream, f"sqlite:///{tmp_path / 'runs.sqlite3'}", top=top) as (client, store):
        run_id = (await post(client, chat("m")))["adapter_critic"]["run_id"]
        await store.flush()
        detail = (await client.get(f"/runs/{run_id}")).json()
    assert [stage["stage"] for stage in detail["stages"]] == ["api_draft", "feedback:1", "refine:1", "feedback:2"]
    assert [stage["target_model"] for stage in detail["stages"]] == ["api-model", "feedback-model"] * 2
    assert detail["intermediate"]["refine:1"] == "Seven." and detail["intermediate"]["stopped"] == 2
