"""What the upstream said reaches the client (issue 18): every top-level, choice and message field of the
answering call, usage details summed over stages, reasoning kept per stage and never shown to a reviewer as
the answer, and usage an upstream did not report flagged instead of counted as zeros."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..conftest import AppFactory, chat
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

EXTRA = {"system_fingerprint": "fp_abc", "service_tier": "default", "timings": {"predicted_ms": 12.5}}
LOGPROBS = {"content": [{"token": "It", "logprob": -0.1, "bytes": [73, 116], "top_logprobs": []}]}
CHOICE_EXTRA = {"logprobs": LOGPROBS, "stop_reason": 128001}
MESSAGE_EXTRA = {"reasoning_content": "The user asks where; Paris.", "refusal": None, "annotations": []}
USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 4,
    "total_tokens": 14,
    "prompt_tokens_details": {"cached_tokens": 8, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 3},
}


def rich(content: str = "It is in Paris.", **overrides: Any) -> Reply:
    fields: dict[str, Any] = {"extra": EXTRA, "choice_extra": CHOICE_EXTRA, "message_extra": MESSAGE_EXTRA}
    return Reply(content, usage=USAGE, **{**fields, **overrides})


def times(n: int, usage: dict[str, Any] = USAGE) -> dict[str, Any]:
    return {
        key: ({k: v * n for k, v in value.items()} if isinstance(value, dict) else value * n)
        for key, value in usage.items()
    }


async def test_direct_relays_every_field_of_the_upstreams_answer(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(rich())
    async with serve() as client:
        body = (await client.post("/chat/completions", json=chat("m-direct"))).json()
    assert {key: body[key] for key in EXTRA} == EXTRA
    assert body["model"] == "m-direct" and body["id"].startswith("chatcmpl-") and body["id"] != "chatcmpl-upstream"
    choice = body["choices"][0]
    assert {key: choice[key] for key in CHOICE_EXTRA} == CHOICE_EXTRA
    assert choice["message"] == {"role": "assistant", "content": "It is in Paris.", **MESSAGE_EXTRA}
    assert body["usage"] == USAGE == body["adapter_critic"]["tokens"]["total"]
    assert body["adapter_critic"]["intermediate"]["api_reasoning"] == MESSAGE_EXTRA["reasoning_content"]


async def test_a_direct_stream_relays_every_field(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(rich())
    body = chat("m-direct", stream=True, stream_options={"include_usage": True})
    async with serve() as client:
        text = (await client.post("/chat/completions", json=body)).text
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert all(chunk["system_fingerprint"] == "fp_abc" for chunk in chunks[:-1])
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert any(d["delta"].get("reasoning_content") == MESSAGE_EXTRA["reasoning_content"] for d in deltas)
    assert all(d["logprobs"] == LOGPROBS for d in deltas if d["delta"].get("content"))
    assert chunks[-1]["usage"] == USAGE
    assert chunks[-1]["adapter_critic"]["intermediate"]["api_reasoning"] == MESSAGE_EXTRA["reasoning_content"]


@pytest.mark.parametrize("stream", [False, True])
async def test_critic_returns_the_final_calls_fields_and_keeps_each_stages_reasoning(
    serve: AppFactory, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.script(
        rich("It is in Lyon.", model="api-model", message_extra={"reasoning_content": "draft thoughts"}),
        rich("Wrong city.", model="critic-model", message_extra={"reasoning_content": "critic thoughts"}),
        rich(model="api-model", message_extra={"reasoning_content": "final thoughts"}),
    )
    request = chat("m-critic", stream=stream, stream_options={"include_usage": True}) if stream else chat("m-critic")
    async with serve() as client:
        response = await client.post("/chat/completions", json=request)
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        ext, usage = chunks[-1]["adapter_critic"], chunks[-1]["usage"]
    else:
        body = response.json()
        ext, usage = body["adapter_critic"], body["usage"]
        assert body["choices"][0]["logprobs"] == LOGPROBS and body["system_fingerprint"] == "fp_abc"
        assert body["choices"][0]["message"]["reasoning_content"] == "final thoughts"
    reasoning = {key: value for key, value in ext["intermediate"].items() if key.endswith("_reasoning")}
    assert reasoning == {
        "api_draft_reasoning": "draft thoughts",
        "critic_reasoning": "critic thoughts",
        "api_final_reasoning": "final thoughts",
    }
    assert usage == times(3)  # details summed over the three stages
    # Reasoning is never shown to a reviewer, or to the second pass, as if it were the answer.
    critic_call, final_call = upstream.calls[1], upstream.calls[2]
    assert "draft thoughts" not in json.dumps(critic_call.body)
    assert "draft thoughts" not in json.dumps(final_call.body)


async def test_an_adapters_edit_keeps_the_drafts_other_fields(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    edit = "<<<<<<< SEARCH\nLyon\n=======\nParis\n>>>>>>> REPLACE"
    upstream.script(rich("It is in Lyon.", model="api-model"), Reply(edit, model="adapter-model"))
    async with serve() as client:
        body = (await client.post("/chat/completions", json=chat("m-adapter"))).json()
    choice = body["choices"][0]
    assert choice["message"]["content"] == "It is in Paris."  # the edit
    assert choice["message"]["reasoning_content"] == MESSAGE_EXTRA["reasoning_content"]  # the rest as it came
    assert choice["logprobs"] == LOGPROBS and body["system_fingerprint"] == "fp_abc"


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_an_upstream_did_not_report_is_flagged(
    serve: AppFactory, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.script(Reply("draft", usage=None, model="api-model"), Reply("critique", model="critic-model"))
    upstream.script(Reply("revised", usage=None, model="api-model"))
    request = chat("m-critic", stream=stream, stream_options={"include_usage": True}) if stream else chat("m-critic")
    async with serve() as client:
        response = await client.post("/chat/completions", json=request)
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        tokens = chunks[-1]["adapter_critic"]["tokens"]
    else:
        tokens = response.json()["adapter_critic"]["tokens"]
    assert tokens["unreported"] == ["api_draft", "api_final"]
    assert tokens["lower_bound"] is True
    assert tokens["total"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}  # the critic's alone


async def test_fully_reported_usage_carries_no_flags(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        tokens = (await client.post("/chat/completions", json=chat("m-direct"))).json()["adapter_critic"]["tokens"]
    assert set(tokens) == {"stages", "total"}
