"""Streaming (`"stream": true`, SPEC §8), in-process against the scripted upstream.

Most tests go through `serve` (network-style upstream calls over httpx; both ends buffered by
`httpx.ASGITransport`, which is fine for checking what was sent). Timing and disconnect tests drive the
ASGI app directly with their own receive/send, and call the upstream in-process with a live stream
(stage `base_url` "/v1", as the middleware and the demo do), so every message is seen as it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter_critic import AdapterCriticMiddleware, Config, create_app
from adapter_critic.demo import demo_config, demo_model_app
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose

from ..conftest import UPSTREAM_URL, AppFactory, asgi_client, chat, make_config
from ..helpers import body_then, post_scope
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

ANSWER = "The Eiffel Tower is in Paris, France."  # 37 characters: the scripted upstream sends 5 pieces of 8
USAGE_1_2_3 = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
OTHER_TOOL_CALL = {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
EDIT = "<<<<<<< SEARCH\nin Lyon\n=======\nin Paris\n>>>>>>> REPLACE"
KEEPALIVE = ": keep-alive"
DONE = "data: [DONE]"


def served_models(base_url: str = UPSTREAM_URL, **critic_extra: Any) -> dict[str, Any]:
    api = {"model": "api-model", "base_url": base_url}
    return {
        "m-direct": {"mode": "direct", "api": api},
        "m-adapter": {"mode": "adapter", "api": api, "adapter": {"model": "adapter-model", "base_url": base_url}},
        "m-critic": {
            "mode": "critic",
            "api": api,
            "critic": {"model": "critic-model", "base_url": base_url},
            **critic_extra,
        },
    }


def live_config(**top: Any) -> Config:
    """Every stage on the in-process upstream (`base_url` "/v1"): its streams arrive live, not buffered."""
    return Config.from_dict({"served_models": served_models("/v1"), "retries": 0, **top})


# -- reading a streamed response ---------------------------------------------------------------


@dataclass
class Streamed:
    status: int
    headers: httpx.Headers
    text: str

    @property
    def events(self) -> list[str]:
        """Every SSE event as sent (`data: ...` or `: keep-alive`), in order."""
        assert self.text.endswith("\n\n"), f"the stream did not end with a complete event: {self.text[-200:]!r}"
        return self.text[:-2].split("\n\n")

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON chunks (every `data:` event but `[DONE]`)."""
        return [json.loads(e[len("data: ") :]) for e in self.events if e.startswith("data: ") and e != DONE]

    @property
    def data_events(self) -> list[str]:
        return [e for e in self.events if e != KEEPALIVE]

    def content(self) -> str:
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in self.chunks if c.get("choices"))

    def error(self) -> dict[str, Any]:
        """The error event that ended the stream (asserting it is the last thing sent, with no [DONE])."""
        assert self.status == 200
        assert DONE not in self.events
        last = json.loads(self.events[-1][len("data: ") :])
        assert set(last) == {"error"}, last
        error: dict[str, Any] = last["error"]
        assert set(error) == {"message", "type", "param", "code"}
        return error


async def stream(client: httpx.AsyncClient, body: dict[str, Any]) -> Streamed:
    response = await client.post("/chat/completions", json={**body, "stream": True})
    return Streamed(response.status_code, response.headers, response.text)


def check_sequence(streamed: Streamed, served: str, *, include_usage: bool = False) -> list[dict[str, Any]]:
    """The chunk sequence OpenAI clients expect; returns the chunks."""
    assert streamed.status == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.events[-1] == DONE
    assert streamed.data_events.count(DONE) == 1
    chunks = streamed.chunks
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["id"] != "chatcmpl-upstream"  # our id, not the upstream's
    assert len({c["created"] for c in chunks}) == 1
    assert isinstance(chunks[0]["created"], int)
    assert {c["model"] for c in chunks} == {served}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["choices"][0]["index"] == 0 for c in chunks if c["choices"])
    assert "adapter_critic" in chunks[-1]  # the chunk before [DONE]
    if include_usage:
        usage_chunk, finish = chunks[-1], chunks[-2]
        assert usage_chunk["choices"] == []
        assert usage_chunk["usage"] == usage_chunk["adapter_critic"]["tokens"]["total"]
        assert "adapter_critic" not in finish  # one extension per stream: on the last chunk only
        body = chunks[:-2]
    else:
        finish = chunks[-1]
        assert "usage" not in finish or finish["usage"] is None
        body = chunks[:-1]
    assert finish["choices"][0]["finish_reason"] is not None
    assert all(c["choices"] and c["choices"][0].get("finish_reason") is None for c in body)
    assert all(c.get("usage") is None for c in chunks[:-1])  # one usage chunk at most, the last
    assert not any("adapter_critic" in c for c in body)
    return chunks


def extension(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    ext: dict[str, Any] = chunks[-1]["adapter_critic"]
    assert set(ext["timings_ms"]) == {*ext["tokens"]["stages"], "total"}
    return ext


async def non_streamed(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def same_answer(streamed: Streamed, completion: dict[str, Any]) -> None:
    """The streamed answer is the non-streamed one: content, finish reason and what the extension reports."""
    chunks = streamed.chunks
    assert streamed.content() == completion["choices"][0]["message"]["content"]
    finish = next(c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason"))
    assert finish["choices"][0]["finish_reason"] == completion["choices"][0]["finish_reason"]
    ext, expected = chunks[-1]["adapter_critic"], completion["adapter_critic"]
    assert ext["mode"] == expected["mode"]
    assert ext["intermediate"] == expected["intermediate"]
    assert ext["tokens"] == expected["tokens"]


# -- direct --------------------------------------------------------------------------------------


async def test_direct_relays_the_upstream_chunks_with_the_served_model(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    async with serve(make_config()) as client:
        upstream.script(Reply(content=ANSWER))
        completion = await non_streamed(client, chat("m-direct"))
        upstream.script(Reply(content=ANSWER))
        streamed = await stream(client, chat("m-direct", temperature=0.5))

    chunks = check_sequence(streamed, "m-direct")
    # role, then the upstream's own 8-character pieces (relayed, not re-cut), then the finish chunk
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant"},
        *({"content": ANSWER[i : i + 8]} for i in range(0, len(ANSWER), 8)),
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    same_answer(streamed, completion)
    ext = extension(chunks)
    assert ext["mode"] == "direct"
    assert ext["intermediate"] == {"api": ANSWER}
    assert ext["tokens"]["stages"] == {"api": USAGE_1_2_3}
    assert "degraded" not in ext

    call = upstream.calls[-1]
    assert call.body["stream"] is True
    assert call.body["stream_options"] == {"include_usage": True}  # so the totals are real
    assert call.body["temperature"] == 0.5
    assert call.body["model"] == "api-model"


async def test_direct_with_include_usage_ends_with_the_usage_chunk(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(content=ANSWER, usage={"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}))
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct", stream_options={"include_usage": True}))

    chunks = check_sequence(streamed, "m-direct", include_usage=True)
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    assert sum(1 for c in chunks if not c["choices"]) == 1  # the upstream's own usage chunk is not relayed
    assert streamed.content() == ANSWER


async def test_usage_falls_back_to_zeros_when_the_upstream_reports_none(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(content=ANSWER, usage=None))
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct", stream_options={"include_usage": True}))

    chunks = check_sequence(streamed, "m-direct", include_usage=True)
    assert chunks[-1]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


# -- critic --------------------------------------------------------------------------------------


def critic_script(upstream: ScriptedUpstream, final: Reply | None = None) -> None:
    upstream.script(
        Reply(content="It is in Lyon.", model="api-model"),
        Reply(content="Wrong city: it is in Paris.", model="critic-model"),
        final or Reply(content=ANSWER, model="api-model"),
    )


async def test_critic_streams_the_second_pass_live(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config()) as client:
        critic_script(upstream)
        completion = await non_streamed(client, chat("m-critic"))
        upstream.reset()
        critic_script(upstream)
        streamed = await stream(client, chat("m-critic", stream_options={"include_usage": True}))

    chunks = check_sequence(streamed, "m-critic", include_usage=True)
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]] == [
        ANSWER[i : i + 8] for i in range(0, len(ANSWER), 8)
    ]
    same_answer(streamed, completion)
    ext = extension(chunks)
    assert ext["intermediate"] == {
        "api_draft": "It is in Lyon.",
        "critic": "Wrong city: it is in Paris.",
        "final": ANSWER,
    }
    assert list(ext["tokens"]["stages"]) == ["api_draft", "critic", "api_final"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}  # all three stages

    draft, critique, final = upstream.calls
    assert "stream" not in draft.body and "stream_options" not in draft.body
    assert "stream" not in critique.body and "stream_options" not in critique.body
    assert final.body["stream"] is True
    assert final.body["stream_options"] == {"include_usage": True}
    assert "Wrong city: it is in Paris." in json.dumps(final.body["messages"][-1])


# -- adapter -------------------------------------------------------------------------------------


def adapter_script(upstream: ScriptedUpstream, draft: str = "The Eiffel Tower is in Lyon, France.") -> None:
    upstream.script(Reply(content=draft, model="api-model"), Reply(content=EDIT, model="adapter-model"))


async def test_adapter_streams_the_edited_text(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config()) as client:
        adapter_script(upstream)
        completion = await non_streamed(client, chat("m-adapter"))
        adapter_script(upstream)
        streamed = await stream(client, chat("m-adapter", stream_options={"include_usage": True}))

    chunks = check_sequence(streamed, "m-adapter", include_usage=True)
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": ANSWER},
        {},
    ]
    same_answer(streamed, completion)
    ext = extension(chunks)
    assert ext["intermediate"]["final"] == ANSWER
    assert ext["intermediate"]["adapter"] == EDIT
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
    assert not any("stream" in call.body for call in upstream.calls)  # draft and review are plain calls


async def test_adapter_sends_a_long_answer_in_several_chunks(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    long_draft = "The Eiffel Tower is in Lyon, France. " + "It is made of iron. " * 60
    adapter_script(upstream, long_draft)
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-adapter"))

    chunks = check_sequence(streamed, "m-adapter")
    expected = long_draft.replace("in Lyon", "in Paris")
    assert streamed.content() == expected
    assert len(chunks) >= 4  # role, at least two content chunks, finish


# -- tool calls in the final stage ---------------------------------------------------------------


def tool_call_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for c in chunks if c["choices"] for call in c["choices"][0]["delta"].get("tool_calls") or []]


@pytest.mark.parametrize("served", ["m-direct", "m-critic"])
async def test_streamed_final_stage_relays_tool_call_deltas(
    served: str, serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    tools = Reply(content=None, tool_calls=[TOOL_CALL, OTHER_TOOL_CALL], finish_reason="tool_calls", model="api-model")
    if served == "m-critic":
        critic_script(upstream, tools)
    else:
        upstream.script(tools)
    async with serve(make_config()) as client:
        streamed = await stream(client, chat(served, tools=[{"type": "function", "function": {"name": "x"}}]))

    chunks = check_sequence(streamed, served)
    assert tool_call_deltas(chunks) == [{"index": 0, **TOOL_CALL}, {"index": 1, **OTHER_TOOL_CALL}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert upstream.calls[-1].body["tools"] == [{"type": "function", "function": {"name": "x"}}]


async def test_adapter_streams_the_drafts_tool_calls_with_an_index(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        Reply(content=None, tool_calls=[TOOL_CALL, OTHER_TOOL_CALL], finish_reason="tool_calls", model="api-model"),
        Reply(content="LGTM", model="adapter-model"),
    )
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-adapter"))

    chunks = check_sequence(streamed, "m-adapter")
    assert tool_call_deltas(chunks) == [{"index": 0, **TOOL_CALL}, {"index": 1, **OTHER_TOOL_CALL}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.content() == ""


# -- errors before the first byte: ordinary §7 responses -----------------------------------------


async def test_unknown_model_is_a_plain_404(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat("nope", stream=True))
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "model_not_found"
    assert upstream.calls == []


async def test_invalid_stream_field_is_a_plain_400(serve: AppFactory) -> None:
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", stream="yes"))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream"


@pytest.mark.parametrize("served", ["m-direct", "m-critic"])
async def test_upstream_5xx_before_the_first_byte_is_a_502(
    served: str, serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(status=500, body='{"error": {"message": "engine crashed"}}'))
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat(served, stream=True))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-should-retry"] == "false"
    error = response.json()["error"]
    assert error["type"] == "upstream_error"
    assert "engine crashed" in error["message"]


async def test_upstream_4xx_on_the_first_call_is_relayed(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    envelope = {"error": {"message": "bad temperature", "type": "invalid_request_error", "param": "temperature"}}
    upstream.script(Reply(status=400, body=json.dumps(envelope)))
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert response.status_code == 400
    assert response.json() == {"error": {**envelope["error"], "code": None}}  # the missing field filled in


async def test_upstream_429_keeps_its_retry_after(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=429, body='{"error": {"message": "slow down"}}', headers={"retry-after": "7"}))
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("served", ["m-direct", "m-critic"])
async def test_upstream_answering_json_to_a_stream_call_is_streamed(
    serve: AppFactory, upstream: ScriptedUpstream, served: str, include_usage: bool
) -> None:
    """Many small servers ignore `stream: true` and answer one JSON completion: the client still gets chunks."""
    call = {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    message = {"role": "assistant", "content": "It is in Paris.", "tool_calls": [call]}
    usage = {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}], "usage": usage}
    if served == "m-critic":  # the draft and critique are plain calls; the second pass is the one streamed
        upstream.script(Reply("draft", model="api-model"), Reply("critique", model="critic-model"))
    upstream.script(Reply(status=200, body=json.dumps(completion), model="api-model"))
    body = chat(served, stream_options={"include_usage": True}) if include_usage else chat(served)
    async with serve(make_config()) as client:
        streamed = await stream(client, body)
    chunks = check_sequence(streamed, served, include_usage=include_usage)
    assert streamed.content() == "It is in Paris."
    assert tool_call_deltas(chunks) == [{"index": 0, **call}]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    final_stage = "api" if served == "m-direct" else "api_final"
    assert extension(chunks)["tokens"]["stages"][final_stage] == usage


async def test_final_stage_failure_with_fail_policy_is_a_502_naming_it(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    critic_script(upstream, Reply(status=500, body='{"error": {"message": "gone"}}', model="api-model"))
    async with serve(make_config(served_models=served_models(on_review_error="fail"))) as client:
        response = await client.post("/chat/completions", json=chat("m-critic", stream=True))
    assert response.status_code == 502
    assert "api_final" in response.json()["error"]["message"]


# -- errors after the first byte: one error event, no [DONE] -------------------------------------


async def test_failure_after_a_keepalive_ends_with_an_error_event(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(status=500, body='{"error": {"message": "engine crashed"}}', delay=0.3))
    async with serve(make_config(keepalive_seconds=0.05)) as client:
        streamed = await stream(client, chat("m-direct"))

    assert streamed.events[0] == KEEPALIVE  # the status (200) went out with it
    assert streamed.chunks == [{"error": streamed.error()}]
    assert streamed.error()["type"] == "upstream_error"
    assert "engine crashed" in streamed.error()["message"]


async def test_upstream_stream_breaking_off_is_a_failure(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content=ANSWER, stream_break_after=3))  # role + two pieces, then the body ends
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct"))

    error = streamed.error()
    assert error["type"] == "upstream_error"
    assert "[DONE]" in error["message"]
    assert streamed.content() == ANSWER[:16]  # what had arrived was relayed ...
    assert not any("adapter_critic" in c for c in streamed.chunks)  # ... but nothing that looks finished
    assert not any(c["choices"][0].get("finish_reason") for c in streamed.chunks if c.get("choices"))


async def test_upstream_stream_without_done_is_a_failure(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content=ANSWER, stream_no_done=True))  # every chunk, finish and usage too
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct"))

    assert "[DONE]" in streamed.error()["message"]
    assert streamed.content() == ANSWER
    assert not any("adapter_critic" in c for c in streamed.chunks)


async def test_upstream_error_event_is_a_failure(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    # An error event mid-stream, then [DONE] (as vLLM does): still a failure, not a finished answer.
    upstream.script(Reply(content=ANSWER, stream_break_after=2, stream_error={"message": "out of memory"}))
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct"))

    error = streamed.error()
    assert "error event" in error["message"]
    assert "out of memory" in error["message"]
    assert streamed.content() == ANSWER[:8]


async def test_critic_second_pass_failing_after_content_went_out_is_not_degraded(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    critic_script(upstream, Reply(content=ANSWER, stream_break_after=3, model="api-model"))
    async with serve(make_config()) as client:  # on_review_error = "draft" (the default)
        streamed = await stream(client, chat("m-critic"))

    assert "api_final" in streamed.error()["message"]
    assert streamed.content() == ANSWER[:16]


# -- on_review_error = "draft" while no answer content went out --------------------------------


async def test_critic_failure_streams_the_draft_degraded(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(content="It is in Lyon.", model="api-model"),
        Reply(status=500, body='{"error": {"message": "critic down"}}', model="critic-model"),
    )
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-critic", stream_options={"include_usage": True}))

    chunks = check_sequence(streamed, "m-critic", include_usage=True)
    assert streamed.content() == "It is in Lyon."
    ext = extension(chunks)
    assert ext["degraded"] is True
    assert "critic down" in ext["intermediate"]["critic_error"]
    assert ext["intermediate"]["final"] == "It is in Lyon."
    assert "critic" not in ext["intermediate"]
    assert list(ext["tokens"]["stages"]) == ["api_draft", "critic"]
    assert [c.model for c in upstream.calls] == ["api-model", "critic-model"]  # no second pass


@pytest.mark.parametrize(
    "final",
    [
        Reply(status=500, body='{"error": {"message": "second pass down"}}', model="api-model"),
        Reply(content=ANSWER, stream_break_after=1, model="api-model"),  # only the role chunk came
        Reply(content=ANSWER, stream_break_after=1, stream_error={"message": "oom"}, model="api-model"),
    ],
    ids=["status-500", "broke-after-role-chunk", "error-event-after-role-chunk"],
)
async def test_second_pass_failing_before_any_content_streams_the_draft_degraded(
    final: Reply, serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    critic_script(upstream, final)
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-critic"))

    chunks = check_sequence(streamed, "m-critic")
    assert streamed.content() == "It is in Lyon."
    assert [c["choices"][0]["delta"].get("role") for c in chunks].count("assistant") == 1
    ext = extension(chunks)
    assert ext["degraded"] is True
    assert "api_final_error" in ext["intermediate"]
    assert ext["intermediate"]["final"] == "It is in Lyon."
    assert list(ext["tokens"]["stages"]) == ["api_draft", "critic", "api_final"]


async def test_second_pass_broken_before_any_content_is_retried_cleanly(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    """Nothing of the failed attempt reached the client (its role chunk was held back), so a retry may answer."""
    critic_script(upstream, Reply(content="cut", stream_break_after=1, model="api-model"))
    upstream.script(Reply(content=ANSWER, model="api-model"))
    async with serve(make_config(retries=1, retry_backoff_seconds=0)) as client:
        streamed = await stream(client, chat("m-critic"))

    chunks = check_sequence(streamed, "m-critic")
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant"}, {"content": ANSWER[:8]}]
    assert streamed.content() == ANSWER
    assert "degraded" not in extension(chunks)
    assert [c.model for c in upstream.calls] == ["api-model", "critic-model", "api-model", "api-model"]


# -- keep-alives ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("served", "replies"),
    [
        ("m-direct", [Reply(content=ANSWER, first_chunk_delay=0.3)]),  # an upstream slow to send its first chunk
        (
            "m-critic",  # an early stage running
            [
                Reply(content="draft", model="api-model"),
                Reply(content="critique", model="critic-model", delay=0.3),
                Reply(content=ANSWER, model="api-model"),
            ],
        ),
    ],
)
async def test_keepalives_go_out_before_the_first_chunk(
    served: str, replies: list[Reply], serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(*replies)
    async with serve(make_config(keepalive_seconds=0.05)) as client:
        streamed = await stream(client, chat(served))

    check_sequence(streamed, served)
    first_data = next(i for i, e in enumerate(streamed.events) if e.startswith("data: "))
    assert first_data >= 2
    assert set(streamed.events[:first_data]) == {KEEPALIVE}
    assert streamed.content() == ANSWER


async def test_no_keepalives_when_the_answer_is_quick(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content=ANSWER))
    async with serve(make_config()) as client:  # keepalive_seconds = 10
        streamed = await stream(client, chat("m-direct"))
    assert KEEPALIVE not in streamed.events


# -- driving the ASGI app directly: live timing and disconnects ---------------------------------


@dataclass
class Connection:
    """One request to an ASGI app driven by the test: the messages it sends, and a disconnect switch."""

    messages: Any
    disconnect: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)  # the app returned
    status: int | None = None
    cancels_left: int | None = None  # the app's task's pending cancellations when it returned
    buffer: str = ""

    async def next_event(self) -> str:
        """The next SSE event, as soon as it is sent (waiting at most 5 s for it)."""
        with anyio.fail_after(5):
            while "\n\n" not in self.buffer:
                message: Message = await self.messages.receive()
                if message["type"] == "http.response.start":
                    self.status = message["status"]
                elif message["type"] == "http.response.body":
                    self.buffer += message.get("body", b"").decode()
                    if not message.get("more_body", False):
                        assert "\n\n" in self.buffer, f"the response ended: {self.status} {self.buffer!r}"
        event, self.buffer = self.buffer.split("\n\n", 1)
        return event

    async def next_data(self) -> str:
        while (event := await self.next_event()) == KEEPALIVE:
            pass
        return event


@contextlib.asynccontextmanager
async def connect(app: ASGIApp, body: dict[str, Any], path: str = "/v1/chat/completions") -> AsyncIterator[Connection]:
    """POST `body` to `app` with our own receive/send; on leaving, the client disconnects and the app must end."""
    raw = json.dumps(body).encode()
    to_test, from_app = anyio.create_memory_object_stream[Message](math.inf)
    conn = Connection(from_app)

    async def gone() -> Message:
        await conn.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await to_test.send(message)

    async def run() -> None:
        try:
            await app(post_scope(path, raw), body_then(raw, gone), send)
            task = asyncio.current_task()
            conn.cancels_left = None if task is None else task.cancelling()
        finally:
            conn.finished.set()

    with to_test, from_app:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            yield conn
            conn.disconnect.set()
            with anyio.fail_after(5):
                await conn.finished.wait()


@contextlib.asynccontextmanager
async def live_app(upstream: ScriptedUpstream, **top: Any) -> AsyncIterator[ASGIApp]:
    """The app with its stages calling the scripted upstream in-process, its streams arriving live."""
    app = build_app(compose(live_config(**top), in_process_app=upstream.app), prefix="/v1")
    async with LifespanManager(app) as manager:
        yield manager.app


async def test_keepalives_go_out_during_a_pause_mid_stream(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="0123456789abcdef", chunk_delay=0.15))  # role, 2 pieces, finish, usage, [DONE]
    async with live_app(upstream, keepalive_seconds=0.05) as app, connect(app, chat("m-direct", stream=True)) as conn:
        events = [await conn.next_event()]
        while events[-1] != DONE:
            events.append(await conn.next_event())

    assert conn.status == 200
    data = [i for i, e in enumerate(events) if e != KEEPALIVE]
    assert events[data[0]].startswith("data: ")  # the role chunk came at once ...
    assert data[1] - data[0] >= 2  # ... then keep-alives while the upstream paused, before the next chunk
    assert set(events[data[0] + 1 : data[1]]) == {KEEPALIVE}
    chunks = [json.loads(events[i][len("data: ") :]) for i in data[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "0123456789abcdef"


async def test_client_disconnect_cancels_the_streaming_upstream_call(upstream: ScriptedUpstream) -> None:
    # 40 pieces, one every second: the upstream would stream for ~40 s unless it is cancelled.
    upstream.script(Reply(content="x" * 320, chunk_delay=1.0))
    aborted = upstream.aborted_signal()
    async with live_app(upstream) as app:
        async with connect(app, chat("m-direct", stream=True)) as conn:
            first = json.loads((await conn.next_data())[len("data: ") :])
            assert first["choices"][0]["delta"] == {"role": "assistant"}
            assert not aborted.is_set()
            conn.disconnect.set()
            with anyio.fail_after(5):
                await aborted.wait()
        assert conn.finished.is_set()  # the app's call returned: nothing keeps running
        assert conn.cancels_left == 0  # the watcher's cancellation was taken back: the server's task goes on as usual
    assert [call.model for call in upstream.aborted] == ["api-model"]
    assert len(upstream.calls) == 1


@pytest.mark.parametrize(
    ("served", "replies", "aborted_model"),
    [
        ("m-direct", [Reply(content=ANSWER, first_chunk_delay=30)], "api-model"),
        (
            "m-critic",
            [Reply(content="draft", model="api-model"), Reply(content="critique", model="critic-model", delay=30)],
            "critic-model",
        ),
    ],
    ids=["slow-first-chunk", "critic-stage-running"],
)
async def test_client_disconnect_after_a_keepalive_cancels_the_upstream_call(
    served: str, replies: list[Reply], aborted_model: str, upstream: ScriptedUpstream
) -> None:
    """Over the network-style client (httpx), while no chunk has come yet: the upstream call is abandoned."""
    upstream.script(*replies)
    aborted = upstream.aborted_signal()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(make_config(keepalive_seconds=0.05), http_client=upstream_client)
        body = chat(served, stream=True)
        async with LifespanManager(app) as manager, connect(manager.app, body, "/chat/completions") as conn:
            assert await conn.next_event() == KEEPALIVE
            assert conn.status == 200
            conn.disconnect.set()
            with anyio.fail_after(5):
                await aborted.wait()
    assert [call.model for call in upstream.aborted] == [aborted_model]
    assert [call.model for call in upstream.calls][-1] == aborted_model  # no later stage was started


# -- the other ways to run the product -----------------------------------------------------------


def gated(app: ASGIApp, after: int, gate: anyio.Event, finished: anyio.Event) -> ASGIApp:
    """`app`, holding back every response body message after the first `after` until `gate` is set."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        sent = 0

        async def gated_send(message: Message) -> None:
            nonlocal sent
            if message["type"] == "http.response.body":
                sent += 1
                if sent > after:
                    await gate.wait()
            await send(message)

        try:
            await app(scope, receive, gated_send if scope["type"] == "http" else send)
        finally:
            if scope["type"] == "http":
                finished.set()

    return wrapped


async def test_middleware_streams_in_process_without_buffering(upstream: ScriptedUpstream) -> None:
    gate, upstream_finished = anyio.Event(), anyio.Event()
    local = gated(upstream.app, after=2, gate=gate, finished=upstream_finished)  # role + first piece, then wait
    app = AdapterCriticMiddleware(local, config=live_config())
    upstream.script(Reply(content=ANSWER))
    async with LifespanManager(app) as manager, connect(manager.app, chat("m-direct", stream=True)) as conn:
        with anyio.fail_after(5):
            role = json.loads((await conn.next_data())[6:])
            first = json.loads((await conn.next_data())[6:])
        assert role["choices"][0]["delta"] == {"role": "assistant"}
        assert first["choices"][0]["delta"] == {"content": ANSWER[:8]}
        assert first["model"] == "m-direct"
        assert not upstream_finished.is_set()  # the first chunk got here while the upstream was still held
        gate.set()
        events = [await conn.next_data()]
        while events[-1] != DONE:
            events.append(await conn.next_data())
    assert upstream_finished.is_set()
    rest = [json.loads(e[6:]) for e in events[:-1]]
    assert ANSWER[:8] + "".join(c["choices"][0]["delta"].get("content") or "" for c in rest) == ANSWER
    assert rest[-1]["adapter_critic"]["intermediate"] == {"api": ANSWER}
    assert upstream.calls[0].path == "/v1/chat/completions"
    assert upstream.calls[0].body["stream"] is True


async def test_in_process_upstream_dropping_its_stream_is_a_failure(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content=ANSWER, stream_break_after=2, stream_drop=True))
    async with live_app(upstream) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver/v1") as client:
            streamed = await stream(client, chat("m-direct"))
    assert streamed.error()["type"] == "upstream_error"
    assert streamed.content() == ANSWER[:8]


async def test_mounted_app_streams(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content=ANSWER))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        parent = Starlette(routes=[Mount("/api/v1", app=create_app(make_config(), http_client=upstream_client))])
        transport = httpx.ASGITransport(app=parent)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            response = await client.post("/api/v1/chat/completions", json=chat("m-direct", stream=True))
    streamed = Streamed(response.status_code, response.headers, response.text)
    check_sequence(streamed, "m-direct")
    assert streamed.content() == ANSWER


@pytest.mark.parametrize("served", list(demo_config().served_models))
async def test_demo_streams_every_mode(served: str) -> None:
    app = build_app(compose(demo_config(), in_process_app=demo_model_app()), prefix="/v1")
    async with asgi_client(app, base_url="http://testserver/v1") as client:
        completion = await non_streamed(client, chat(served, "Hi there"))
        streamed = await stream(client, chat(served, "Hi there"))
    check_sequence(streamed, served)
    same_answer(streamed, completion)


# -- progress: clients that ask hear of each earlier stage ---------------------------------------------------------


def progress_of(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["adapter_critic"]["progress"] for c in chunks if "progress" in c.get("adapter_critic", {})]


async def test_progress_chunks_tell_of_each_earlier_stage(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    critic_script(upstream)
    body = chat("m-critic", stream=True, x_adapter_critic={"progress": True})
    async with serve(make_config()) as client:
        streamed = await stream(client, body)
    chunks = streamed.chunks
    progress = progress_of(chunks)
    assert [(p["stage"], p["status"]) for p in progress] == [("api_draft", "ok"), ("critic", "ok")]
    assert all(isinstance(p["ms"], float | int) and p["ms"] >= 0 for p in progress)
    # They come first, each with an empty delta (the SDKs pass them through); then the answer, unchanged.
    for chunk in chunks[:2]:
        assert chunk["choices"] == [{"index": 0, "delta": {}, "finish_reason": None}]
        assert chunk["id"] == chunks[-1]["id"] and chunk["model"] == "m-critic"
    assert streamed.content() == ANSWER
    assert "progress" not in chunks[-1]["adapter_critic"] and chunks[-1]["adapter_critic"]["mode"] == "critic"


async def test_progress_reports_a_failed_stage(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("It is in Lyon.", model="api-model"), Reply(status=500, body="{}", model="critic-model"))
    body = chat("m-critic", stream=True, x_adapter_critic={"progress": True})
    async with serve(make_config()) as client:
        streamed = await stream(client, body)
    assert [(p["stage"], p["status"]) for p in progress_of(streamed.chunks)] == [
        ("api_draft", "ok"),
        ("critic", "failed"),
    ]
    assert streamed.content() == "It is in Lyon."  # degraded to the draft


async def test_without_the_flag_there_is_no_progress(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    critic_script(upstream)
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-critic"))
    assert progress_of(streamed.chunks) == []
    check_sequence(streamed, "m-critic")


async def test_a_direct_stream_of_n_choices_relays_each_choice_and_its_finish(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> str:
        return "data: " + json.dumps({"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}) + "\n\n"

    events = [
        chunk(0, {"role": "assistant", "content": ""}),
        chunk(1, {"role": "assistant", "content": ""}),
        chunk(0, {"content": "first"}),
        chunk(1, {"content": "second"}),
        chunk(0, {}, "stop"),
        chunk(1, {}, "length"),
        "data: [DONE]\n\n",
    ]
    upstream.script(Reply(body="".join(events), headers={"content-type": "text/event-stream"}))
    async with serve(make_config()) as client:
        streamed = await stream(client, chat("m-direct", n=2))
    chunks = streamed.chunks
    by_choice: dict[int, str] = {}
    for c in chunks:
        for choice in c["choices"]:
            by_choice[choice["index"]] = by_choice.get(choice["index"], "") + (choice["delta"].get("content") or "")
    assert by_choice == {0: "first", 1: "second"}
    finishes = [(ch["index"], ch["finish_reason"]) for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert finishes == [(0, "stop"), (1, "length")]
    assert "adapter_critic" in chunks[-1] and chunks[-1]["choices"][0]["index"] == 1
