"""The best_of_n workflow (issue 12): candidates at once, then a judge — pairwise in both orders (a position-biased
judge yields ties), or pointwise; unparseable verdicts asked once more, then ties; failed candidates left out."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message

from adapter_critic import ConfigError, create_app
from adapter_critic.workflows.judging import (
    DEFAULT_POINTWISE_SYSTEM_PROMPT,
    RETRY_INSTRUCTION,
    parse_score,
    parse_vote,
)

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import post, raw_post, usage_totalling
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL, "options": {"max_tokens": 50}}
JUDGE = {"model": "judge-model", "base_url": UPSTREAM_URL}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def best_of(**served: Any) -> Any:
    return make_config(served_models={"m": {"mode": "best_of_n", "api": API, "judge": JUDGE, **served}})


def candidates(*texts: str) -> list[Reply]:
    """A reply per candidate, all held until every one arrived (they overlap in time)."""
    return [
        Reply(text, model="api-model", gather=len(texts), group="candidates", usage=usage_totalling(10 + i))
        for i, text in enumerate(texts)
    ]


def shown(first: str, second: str) -> str:
    """What a pairwise judge call shows: `first` as reply A, `second` as B (a `Reply.match`)."""
    return f"<reply_A>\n{first}\n</reply_A>\n\n<reply_B>\n{second}\n</reply_B>"


def judge(first: str, second: str, verdict: str) -> Reply:
    return Reply(f"Because.\n{verdict}", model="judge-model", match=shown(first, second), usage=usage_totalling(2))


async def test_pairwise_knockout_asks_both_orders(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    # A judge that prefers beta over alpha, and gamma over beta, whatever the order.
    upstream.script(
        *candidates("alpha", "beta", "gamma"),
        judge("alpha", "beta", "Winner: B"),
        judge("beta", "alpha", "**Winner: A**"),
        judge("beta", "gamma", "Winner: B"),
        judge("gamma", "beta", "winner: a"),
    )
    config = best_of(candidate_options={"temperature": 0.9, "seed": 7})
    async with serve(config) as client:
        data = await post(client, chat("m", "Pick a word.", tools=[TOOL], seed=1))
    calls = upstream.calls
    assert [call.model for call in calls] == ["api-model"] * 3 + ["judge-model"] * 4
    # Candidates: the request's options, the config's sampling options over them, each its own seed.
    assert sorted(call.body["seed"] for call in calls[:3]) == [7, 8, 9]
    assert all(
        c.body["temperature"] == 0.9 and c.body["tools"] == [TOOL] and c.body["max_tokens"] == 50 for c in calls[:3]
    )
    assert all("tools" not in call.body and "seed" not in call.body for call in calls[3:])  # the judge: text only
    ext = data["adapter_critic"]
    assert ext["intermediate"]["candidates"] == ["alpha", "beta", "gamma"]
    assert ext["intermediate"]["chosen"] == 2
    assert [(j["pair"], j["votes"], j["winner"], j["tie"]) for j in ext["intermediate"]["judgments"]] == [
        ([0, 1], [1, 1], 1, False),
        ([1, 2], [2, 2], 2, False),
    ]
    assert ext["intermediate"]["judgments"][0]["reasons"] == ["Because.", "Because."]
    assert data["choices"][0]["message"]["content"] == "gamma" == ext["intermediate"]["final"]
    assert list(ext["tokens"]["stages"]) == ["candidate:1", "candidate:2", "candidate:3", "judge"]
    assert ext["tokens"]["stages"]["judge"]["total_tokens"] == 4 * 2
    assert data["usage"] == ext["tokens"]["total"] and data["usage"]["total_tokens"] == 10 + 11 + 12 + 8


async def test_a_position_biased_judge_yields_ties(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*candidates("alpha", "beta", "gamma"), *(Reply("Winner: A", model="judge-model") for _ in range(4)))
    async with serve(best_of()) as client:
        data = await post(client, chat("m"))
    judgments = data["adapter_critic"]["intermediate"]["judgments"]
    assert [(j["pair"], j["votes"], j["tie"]) for j in judgments] == [([0, 1], [0, 1], True), ([0, 2], [0, 2], True)]
    assert data["adapter_critic"]["intermediate"]["chosen"] == 0
    assert data["choices"][0]["message"]["content"] == "alpha"
    # Each comparison really was shown both ways round.
    judge_calls = [call.messages[1]["content"] for call in upstream.calls[3:]]
    assert (
        sum(shown("alpha", "beta") in c for c in judge_calls)
        == sum(shown("beta", "alpha") in c for c in judge_calls)
        == 1
    )


async def test_an_unparseable_verdict_is_asked_once_more_then_a_tie(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        *candidates("alpha", "beta"),
        judge("alpha", "beta", "Both are fine."),  # unparseable, then unparseable again: a tie
        judge("beta", "alpha", "Hmm."),  # unparseable, then a verdict for beta
        Reply(
            "Still thinking.", model="judge-model", match="alpha\n</reply_A>\n\n<reply_B>\nbeta\n</reply_B>\n\nWhich"
        ),
        Reply("Winner: A", model="judge-model", match="beta\n</reply_A>\n\n<reply_B>\nalpha\n</reply_B>\n\nWhich"),
    )
    async with serve(best_of(n=2)) as client:
        data = await post(client, chat("m"))
    retries = [call for call in upstream.calls[2:] if len(call.messages) == 4]
    assert len(upstream.calls) == 2 + 4 and len(retries) == 2
    form = "`Winner: A`, `Winner: B` or `Winner: tie`"
    assert all(call.messages[3]["content"] == RETRY_INSTRUCTION.format(form=form) for call in retries)
    [judgment] = data["adapter_critic"]["intermediate"]["judgments"]
    assert judgment["votes"] == [None, 1] and judgment["tie"] is True and judgment["winner"] == 0
    assert data["choices"][0]["message"]["content"] == "alpha"


async def test_pointwise_scores_each_candidate(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        *candidates("alpha", "beta", "gamma"),
        Reply("Fine.\nScore: 6", model="judge-model", match="<reply>\nalpha"),
        Reply("Good. **Score:** 8/10", model="judge-model", match="<reply>\nbeta"),
        Reply("8", model="judge-model", match="<reply>\ngamma"),
    )
    async with serve(best_of(judging="pointwise")) as client:
        data = await post(client, chat("m"))
    assert all(call.messages[0]["content"] == DEFAULT_POINTWISE_SYSTEM_PROMPT for call in upstream.calls[3:])
    ext = data["adapter_critic"]["intermediate"]
    assert sorted((j["candidate"], j["score"]) for j in ext["judgments"]) == [(0, 6.0), (1, 8.0), (2, 8.0)]
    assert ext["chosen"] == 1  # a tie goes to the earlier candidate
    assert data["choices"][0]["message"]["content"] == "beta"


async def test_the_chosen_candidates_tool_calls_are_returned(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    upstream.script(
        Reply("plain", model="api-model"),
        Reply(None, tool_calls=[call], finish_reason="tool_calls", model="api-model"),
        Reply("Winner: B", model="judge-model", match="<reply_A>\nplain"),
        Reply("Winner: A", model="judge-model", match="<reply_B>\nplain"),
    )
    async with serve(best_of(n=2)) as client:
        data = await post(client, chat("m", tools=[TOOL]))
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"] == [call]
    assert data["adapter_critic"]["intermediate"]["candidates"][1].startswith("Tool calls: ")


async def test_a_failed_candidate_is_left_out(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("alpha", model="api-model"),
        Reply(status=500, body='{"error": {"message": "overloaded"}}', model="api-model"),
        Reply("Winner: A", model="judge-model"),
        Reply("Winner: A", model="judge-model"),
    )
    async with serve(best_of(n=3)) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    [failed] = ext["intermediate"]["candidate_errors"]
    assert ext["intermediate"]["candidates"].count(None) == 1
    assert ext["intermediate"]["candidates"][int(failed.split(":")[1]) - 1] is None
    assert len(ext["intermediate"]["judgments"]) == 1  # the two that answered
    assert failed in ext["tokens"]["stages"]


async def test_every_candidate_failing_is_the_requests_failure(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    bad = '{"error": {"message": "bad tools", "type": "invalid_request_error", "param": "tools", "code": null}}'
    upstream.script(*(Reply(status=400, body=bad, model="api-model") for _ in range(2)))
    async with serve(best_of(n=2)) as client:
        data = await post(client, chat("m"), status=400)
    assert data["error"]["message"] == "bad tools"  # the client's own 4xx, relayed as the upstream said it
    assert [call.model for call in upstream.calls] == ["api-model", "api-model"]


async def test_a_failed_judge_keeps_the_leader(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*candidates("alpha", "beta"), Reply(status=500, body="{}", model="judge-model"))
    async with serve(best_of(n=2)) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True and "judge" in ext["intermediate"]["judge_error"]
    assert ext["intermediate"]["chosen"] == 0 and data["choices"][0]["message"]["content"] == "alpha"


async def test_the_chosen_candidate_streams_as_chunks(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*candidates("alpha", "beta"), Reply("Winner: B", model="judge-model", match=shown("alpha", "beta")))
    upstream.script(Reply("Winner: A", model="judge-model", match=shown("beta", "alpha")))
    async with serve(best_of(n=2)) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "beta"
    assert all("stream" not in call.body for call in upstream.calls)  # candidates are plain calls, judged first
    assert chunks[-1]["adapter_critic"]["intermediate"]["chosen"] == 1
    assert response.text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("reply", "vote"),
    [
        ("Winner: A", "A"),
        ("reasoning...\n**Winner:** B", "B"),
        ("The better reply is B.", "B"),
        ("Verdict: Reply A", "A"),
        ("winner: tie", "tie"),
        ("B", "B"),
        ("`A`", "A"),
        ("Winner: A\n...on reflection, Winner: B", "B"),
        ("Both are good.", None),
        ("", None),
    ],
)
def test_votes_are_read_tolerantly(reply: str, vote: str | None) -> None:
    assert parse_vote(reply) == vote


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Score: 7", 7.0),
        ("**Score**: 9/10", 9.0),
        ("I'd give it 6/10.", 6.0),
        ("10", 10.0),
        ("Score: 11", None),
        ("good", None),
    ],
)
def test_scores_are_read_tolerantly(reply: str, score: float | None) -> None:
    assert parse_score(reply) == score


def test_best_of_n_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="n"):
        best_of(n=0)
    with pytest.raises(ConfigError, match="judging"):
        best_of(judging="ranked")


async def test_leaving_client_cancels_every_candidate_call(upstream: ScriptedUpstream) -> None:
    upstream.script(*(Reply(f"c{i}", delay=60, model="api-model") for i in range(3)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(best_of(), http_client=upstream_client)
        async with LifespanManager(app) as manager:

            async def receive() -> Message:
                with anyio.fail_after(10):
                    await upstream.until_holding(3)  # every candidate call is in flight
                return {"type": "http.disconnect"}

            async def send(message: Message) -> None:
                pass

            await raw_post(manager.app, chat("m"), receive, send)
    assert len(upstream.aborted) == 3 and upstream.holding == 0
    assert all(call.model == "api-model" for call in upstream.aborted)


@given(st.text(max_size=300))
def test_reading_any_judge_reply_is_total(reply: str) -> None:
    assert parse_vote(reply) in ("A", "B", "tie", None)
    score = parse_score(reply)
    assert score is None or 0 <= score <= 10


def test_reading_a_huge_hostile_reply_finishes() -> None:
    # Bounded repetitions: a megabyte of near-misses is read in one pass, not a quadratic backtrack.
    hostile = ("winner " + " " * 50 + "*" * 50) * 10_000 + "score " + "\t" * 100_000
    assert parse_vote(hostile) is None and parse_score(hostile) is None
