"""The chain_of_verification workflow: a baseline, a plan, verification questions answered at once and each without
the baseline, the final answer revised after them; a failed plan, failed questions, a baseline that calls tools;
the verifier target, settings checked at load; the run store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter_critic import ConfigError
from adapter_critic.workflows.verification import (
    DEFAULT_PLAN_SYSTEM_PROMPT,
    DEFAULT_VERIFY_SYSTEM_PROMPT,
    VERIFIED_LEAD,
)

from ..conftest import AppFactory, chat, make_config
from ..helpers import post, target
from ..scripted_upstream import Reply, ScriptedUpstream
from ..store.runs import recording

pytestmark = pytest.mark.anyio

API = target("api-model")
VERIFIER = target("verifier-model")
ASKED = "Tell me about Australia's capital."
BASELINE = "Australia's capital is Sydney, its largest city, founded in 1788."
PLAN = """Here are the questions:
1. What is the capital city of Australia?
2) **What is the largest city in Australia?**
3. In which year was Sydney founded?
4. What is the population of Sydney?"""
QUESTIONS = [
    "What is the capital city of Australia?",
    "What is the largest city in Australia?",
    "In which year was Sydney founded?",
]
ANSWERS = ["Canberra.", "Sydney.", "1788."]
SERVED = {"mode": "chain_of_verification", "api": API, "verifier": VERIFIER, "max_questions": 3}


def cove(**served: Any) -> Any:
    given = {key: value for key, value in {**SERVED, **served}.items() if value is not None}
    return make_config(served_models={"m": given})


def verifications(*answers: str | Reply, model: str = "verifier-model") -> list[Reply]:
    """A reply per question, matched by it."""
    return [
        answer if isinstance(answer, Reply) else Reply(answer, model=model, match=question)
        for question, answer in zip(QUESTIONS, answers, strict=True)
    ]


def held(replies: list[Reply]) -> list[Reply]:
    """`replies`, each held until every one's call arrived: proof that the calls overlapped in time."""
    for reply in replies:
        reply.gather, reply.group = len(replies), "verify"
    return replies


def script(
    upstream: ScriptedUpstream,
    *verify: Reply,
    final: str = "Australia's capital is Canberra.",
    planner: str = "verifier-model",
) -> None:
    upstream.script(
        Reply(BASELINE, model="api-model", match=ASKED),
        Reply(PLAN, model=planner, match="<draft_reply>"),
        *verify,
        Reply(final, model="api-model", match=VERIFIED_LEAD),
    )


async def test_questions_are_answered_at_once_without_the_baseline(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    script(upstream, *held(verifications(*ANSWERS)))
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED, temperature=0.4))
    baseline, plan, *verify, final = upstream.calls
    assert [baseline.model, plan.model, final.model] == ["api-model", "verifier-model", "api-model"]
    # The plan: the conversation and the baseline, asking for at most max_questions, without the request's options.
    assert plan.messages[0]["content"] == DEFAULT_PLAN_SYSTEM_PROMPT and "temperature" not in plan.body
    assert BASELINE in plan.messages[1]["content"] and ASKED in plan.messages[1]["content"]
    assert "at most 3 verification questions" in plan.messages[1]["content"]
    # Each question alone: not the baseline, not the conversation, no request options; all three at once.
    assert sorted(call.messages[1]["content"] for call in verify) == sorted(QUESTIONS)
    for call in verify:
        assert call.model == "verifier-model" and call.messages[0]["content"] == DEFAULT_VERIFY_SYSTEM_PROMPT
        text = json.dumps(call.messages)
        assert "Sydney, its largest city" not in text and ASKED not in text and "temperature" not in call.body
    # The final call: the conversation, the baseline as the assistant's turn, then every question and its answer.
    assert final.messages[:2] == [{"role": "user", "content": ASKED}, {"role": "assistant", "content": BASELINE}]
    revise = final.messages[2]["content"]
    assert revise.startswith(VERIFIED_LEAD) and final.body["temperature"] == 0.4
    assert "Question 1: What is the capital city of Australia?\nAnswer: Canberra." in revise
    assert "Question 3: In which year was Sydney founded?\nAnswer: 1788." in revise
    assert "population" not in revise  # the fourth question is beyond max_questions
    ext = data["adapter_critic"]
    assert ext["intermediate"] == {
        "baseline": BASELINE,
        "plan": PLAN,
        "questions": QUESTIONS,
        "verifications": [{"question": q, "answer": a} for q, a in zip(QUESTIONS, ANSWERS, strict=True)],
        "final": "Australia's capital is Canberra.",
    }
    stages = list(ext["tokens"]["stages"])
    assert stages[:2] == ["baseline", "plan"] and sorted(stages[2:5]) == ["verify:1", "verify:2", "verify:3"]
    assert stages[5:] == ["final"]
    assert ext["targets"]["verify:1"].startswith("verifier-model@") and "degraded" not in ext
    assert data["usage"]["total_tokens"] == 6 * 3 and set(ext["timings_ms"]) == {*ext["tokens"]["stages"], "total"}


async def test_questions_can_be_asked_after_the_conversation(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    script(upstream, *verifications(*ANSWERS, model="api-model"), planner="api-model")
    async with serve(cove(verify_with_conversation=True, verifier=None)) as client:
        await post(client, chat("m", ASKED))
    verify = upstream.calls[2:5]
    for call in verify:
        asked = call.messages[1]["content"]
        assert ASKED in asked and "Sydney, its largest city" not in asked and asked.endswith("?")
        assert call.model == "api-model"  # no verifier: the API target


async def test_a_failed_plan_leaves_the_baseline(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(BASELINE, model="api-model"), Reply(status=500, body="{}", model="verifier-model"))
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED))
    ext = data["adapter_critic"]
    assert len(upstream.calls) == 2 and ext["degraded"] is True and "plan" in ext["intermediate"]["plan_error"]
    assert data["choices"][0]["message"]["content"] == BASELINE == ext["intermediate"]["final"]


async def test_a_plan_without_questions_leaves_the_baseline(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(BASELINE, model="api-model"), Reply("Nothing to check here.", model="verifier-model"))
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED))
    ext = data["adapter_critic"]
    assert len(upstream.calls) == 2 and "degraded" not in ext and ext["intermediate"]["questions"] == []
    assert data["choices"][0]["message"]["content"] == BASELINE


async def test_a_failed_question_is_left_out(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    failed = Reply(status=503, body="{}", model="verifier-model", match=QUESTIONS[1])
    script(upstream, *verifications("Canberra.", failed, "1788."))
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True and list(ext["intermediate"]["verify_errors"]) == ["verify:2"]
    assert [v["question"] for v in ext["intermediate"]["verifications"]] == [QUESTIONS[0], QUESTIONS[2]]
    revise = upstream.calls[-1].messages[-1]["content"]
    assert "Question 2: In which year was Sydney founded?" in revise and QUESTIONS[1] not in revise
    assert data["choices"][0]["message"]["content"] == "Australia's capital is Canberra."


async def test_every_question_failing_leaves_the_baseline(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    failing = [Reply(status=500, body="{}", model="verifier-model", match=q) for q in QUESTIONS]
    script(upstream, *failing)
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED))
    ext = data["adapter_critic"]
    assert len(upstream.calls) == 5 and ext["degraded"] is True  # no final call
    assert len(ext["intermediate"]["verify_errors"]) == 3 and ext["intermediate"]["verifications"] == []
    assert data["choices"][0]["message"]["content"] == BASELINE


async def test_a_baseline_that_calls_tools_stands(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    upstream.script(Reply(None, tool_calls=[call], finish_reason="tool_calls", model="api-model"))
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    async with serve(cove()) as client:
        data = await post(client, chat("m", ASKED, tools=[tool]))
    assert len(upstream.calls) == 1 and data["choices"][0]["message"]["tool_calls"] == [call]
    assert json.loads(data["adapter_critic"]["intermediate"]["baseline_tool_calls"]) == [call]


async def test_the_final_answer_streams_live(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    script(upstream, *verifications(*ANSWERS), final="Canberra, streamed.")
    async with serve(cove()) as client:
        response = await client.post("/chat/completions", json=chat("m", ASKED, stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Canberra, streamed."
    )
    assert [c.body.get("stream", False) for c in upstream.calls] == [False] * 5 + [True]


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ({"max_questions": 0}, r"max_questions: Expected `int` >= 1"),
        ({"max_questions": 17}, r"max_questions: Expected `int` <= 16"),
        ({"verify_with_conversation": "yes"}, r"verify_with_conversation: Expected `bool`"),
    ],
)
def test_settings_are_checked_at_load(setting: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        cove(**setting)


async def test_the_run_store_records_every_stage(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    script(upstream, *verifications(*ANSWERS))
    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    async with recording(upstream, url, top={"served_models": {"m": SERVED}}) as (client, store):
        run_id = (await post(client, chat("m", ASKED)))["id"]
        await store.flush()
        detail = (await client.get(f"/runs/{run_id}")).json()
    stages = [s["stage"] for s in detail["stages"]]
    assert stages[:2] == ["baseline", "plan"] and stages[-1] == "final"
    assert sorted(stages[2:5]) == ["verify:1", "verify:2", "verify:3"]
    assert detail["intermediate"]["questions"] == QUESTIONS
