"""`POST /responses` in-process against the scripted upstream: what the stages are sent, the answer plain and
streamed, keep-alives and progress, statelessness, errors, auth and limits, a client that goes away."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from openai.types.responses import Response as SDKResponse
from starlette.types import Message

from adapter_critic import create_app

from ..conftest import UPSTREAM_URL, AppFactory, make_config
from ..scripted_upstream import Reply, ScriptedUpstream
from .test_responses_mapping import EVENTS

pytestmark = pytest.mark.anyio

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}


def events_of(text: str) -> list[dict[str, Any]]:
    parsed = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            payload = json.loads(lines[-1].removeprefix("data: "))
            assert lines[0] == f"event: {payload['type']}"
            EVENTS.validate_python(payload)
            parsed.append(payload)
    return parsed


async def test_a_critic_run_answers_the_response_object(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Draft."), Reply("Say where."), Reply("Paris, France."))
    async with serve() as client:
        answer = await client.post(
            "/responses",
            json={
                "model": "m-critic",
                "input": "Where is the Eiffel Tower?",
                "instructions": "Be brief.",
                "temperature": 0.1,
                "max_output_tokens": 50,
                "metadata": {"ticket": "7"},
                "store": True,
            },
        )
    assert answer.status_code == 200, answer.text
    data = answer.json()
    SDKResponse.model_validate(data)
    assert data["id"].startswith("resp_") and data["model"] == "m-critic" and data["status"] == "completed"
    assert data["output"][0]["content"][0]["text"] == "Paris, France."
    assert data["store"] is False and data["metadata"] == {"ticket": "7"}
    assert data["usage"]["total_tokens"] == 9  # three stages of 1/2/3
    assert data["adapter_critic"]["intermediate"]["critic"] == "Say where."
    draft, critique, final = upstream.calls
    assert draft.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Where is the Eiffel Tower?"},
    ]
    assert (draft.body["temperature"], draft.body["max_tokens"]) == (0.1, 50)
    assert "temperature" not in critique.body  # reviewers get their own options, never the client's
    assert final.body["max_tokens"] == 50 and "store" not in final.body and "metadata" not in final.body


async def test_tools_go_to_the_api_stage_and_calls_come_back_as_items(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(None, tool_calls=[CALL], finish_reason="tool_calls"))
    async with serve() as client:
        answer = await client.post(
            "/responses",
            json={"model": "m-direct", "input": "Weather?", "tools": [WEATHER], "tool_choice": "required"},
        )
    [item] = answer.json()["output"]
    assert (item["type"], item["call_id"], item["arguments"]) == ("function_call", "call_1", '{"city":"Paris"}')
    [call] = upstream.calls
    assert call.body["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert call.body["tool_choice"] == "required"


async def test_a_stream_is_the_responses_event_sequence(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("The Eiffel Tower is in Paris."))
    async with serve() as client:
        answer = await client.post("/responses", json={"model": "m-direct", "input": "Where?", "stream": True})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    events = events_of(answer.text)
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "The Eiffel Tower is in Paris."
    completed = events[-1]["response"]
    assert completed["usage"]["total_tokens"] == 3 and completed["adapter_critic"]["mode"] == "direct"
    assert "[DONE]" not in answer.text


async def test_an_adapter_answer_and_a_length_stop_stream_whole(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    edit = "<<<<<<< SEARCH\nLyon\n=======\nParis\n>>>>>>> REPLACE"
    upstream.script(Reply("In Lyon", finish_reason="length"), Reply(edit))
    async with serve() as client:
        answer = await client.post("/responses", json={"model": "m-adapter", "input": "Where?", "stream": True})
    events = events_of(answer.text)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["content"][0]["text"] == "In Paris"


async def test_a_failure_mid_stream_ends_with_error_and_response_failed(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply("The Eiffel Tower is in Paris.", stream_break_after=3, stream_error={"message": "boom"}))
    async with serve() as client:
        answer = await client.post("/responses", json={"model": "m-direct", "input": "Where?", "stream": True})
    events = events_of(answer.text)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert "boom" in events[-2]["message"] and events[-1]["response"]["status"] == "failed"


async def test_errors_are_openai_envelopes(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config(max_body_bytes=2000)) as client:
        unknown = await client.post("/responses", json={"model": "nope", "input": "x"})
        stateful = await client.post(
            "/responses", json={"model": "m-direct", "input": "x", "previous_response_id": "resp_1"}
        )
        hosted = await client.post("/responses", json={"model": "m-direct", "input": "x", "tools": [{"type": "x"}]})
        huge = await client.post("/responses", json={"model": "m-direct", "input": "x" * 3000})
        not_json = await client.post("/responses", content=b"{")
        get = await client.get("/responses")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert stateful.status_code == 400 and stateful.json()["error"]["param"] == "previous_response_id"
    assert "keeps no responses" in stateful.json()["error"]["message"]
    assert hosted.status_code == 400 and hosted.json()["error"]["param"] == "tools[0].type"
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    assert get.status_code == 405
    assert upstream.calls == []


async def test_the_upstreams_own_4xx_is_relayed(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    refusal = {"error": {"message": "context too long", "type": "invalid_request_error", "param": None, "code": None}}
    upstream.script(Reply(status=400, body=json.dumps(refusal)))
    async with serve() as client:
        answer = await client.post("/responses", json={"model": "m-direct", "input": "x"})
    assert answer.status_code == 400 and answer.json() == refusal


async def test_inbound_auth_guards_the_route(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "sk-in")
    async with serve(make_config(auth_api_keys_env="INBOUND_KEYS")) as client:
        refused = await client.post("/responses", json={"model": "m-direct", "input": "x"})
        allowed = await client.post(
            "/responses", json={"model": "m-direct", "input": "x"}, headers={"authorization": "Bearer sk-in"}
        )
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert allowed.status_code == 200
    assert "authorization" not in upstream.calls[0].headers  # the caller's key is never forwarded


async def test_with_a_passthrough_other_models_go_to_its_responses_endpoint(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PASS_KEY", "sk-pass")
    config = make_config(passthrough={"model": "-", "base_url": UPSTREAM_URL, "api_key_env": "PASS_KEY"})
    async with serve(config) as client:
        relayed = await client.post("/responses", json={"model": "gpt-hosted", "input": "Hi"})
        served = await client.post("/responses", json={"model": "m-direct", "input": "Hi"})
        broken = await client.post("/responses", content=b"{")
    assert relayed.json() == {"id": "resp_upstream", "object": "response", "model": "gpt-hosted", "output": []}
    assert served.json()["object"] == "response" and served.json()["model"] == "m-direct"
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    first, second = upstream.calls
    assert first.path == "/v1/responses" and first.headers["authorization"] == "Bearer sk-pass"
    assert first.body == {"model": "gpt-hosted", "input": "Hi"}
    assert second.path == "/v1/chat/completions"


async def test_keepalives_while_stages_run_and_progress_when_asked(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply("Draft.", model="api-model", delay=0.3), Reply("Fine.", model="critic-model"))
    body = {"model": "m-critic", "input": "Hi", "stream": True, "x_adapter_critic": {"progress": True}}
    async with serve(make_config(keepalive_seconds=0.05)) as client:
        answer = await client.post("/responses", json=body)
    assert answer.text.startswith(": keep-alive\n\n")  # while the draft was being written
    events = events_of(answer.text)
    progress = [e["adapter_critic"]["progress"]["stage"] for e in events if "adapter_critic" in e]
    assert progress == ["api_draft", "critic"]
    assert events[-1]["type"] == "response.completed"


async def test_a_client_that_goes_away_cancels_the_run(
    upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter_critic")
    upstream.script(Reply("Draft.", model="api-model"), Reply("critique", model="critic-model", delay=30))
    holding, aborted, disconnect = upstream.holding_signal(), upstream.aborted_signal(), anyio.Event()
    raw = json.dumps({"model": "m-critic", "input": "Hi", "stream": True}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/responses",
        "raw_path": b"/responses",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    messages: list[Message] = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(make_config(), http_client=upstream_client)
        async with LifespanManager(app) as manager, anyio.create_task_group() as tg:
            tg.start_soon(manager.app, scope, receive, send)
            with anyio.fail_after(5):  # a hang guard
                await holding.wait()  # the critic's call is running
                disconnect.set()
                await aborted.wait()  # ... and is cancelled
    assert [call.model for call in upstream.aborted] == ["critic-model"]
    gone = [r.getMessage() for r in caplog.records if "the client went away" in r.getMessage()]
    assert len(gone) == 1 and gone[0].startswith("[resp_")  # the request id: the run's, as the response's id would be
    ended = [r.getMessage() for r in caplog.records if " cancelled in " in r.getMessage()]
    assert len(ended) == 1 and "retries: 0" in ended[0]  # a call cancelled mid-attempt is no retry


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstreams_reasoning_comes_back_as_a_reasoning_item(
    serve: AppFactory, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.script(Reply("4", message_extra={"reasoning_content": "2 + 2 is 4."}))
    async with serve() as client:
        answer = await client.post("/responses", json={"model": "m-direct", "input": "2 + 2?", "stream": stream})
    data = events_of(answer.text)[-1]["response"] if stream else answer.json()
    assert [item["type"] for item in data["output"]] == ["reasoning", "message"]
    assert data["output"][0]["content"] == [{"type": "reasoning_text", "text": "2 + 2 is 4."}]
    assert data["output"][1]["content"][0]["text"] == "4"
