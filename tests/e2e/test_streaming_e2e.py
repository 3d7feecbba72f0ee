"""Streaming end to end (SPEC §8): real `uvicorn adapter_critic.asgi:app` in front of the scripted upstream
running as a real server, read with the official `openai` SDK (`stream=True`) and with raw httpx.

The servers start once per module; each test resets the upstream's script, calls and aborts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionChunk

from ..conftest import RemoteUpstream as Upstream
from ..conftest import run_app, sdk
from ..helpers import served_toml

MESSAGES: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]
ANSWER = "The Eiffel Tower is in Paris, France."
EDIT = "<<<<<<< SEARCH\nin Lyon\n=======\nin Paris\n>>>>>>> REPLACE"
KEEPALIVE_SECONDS = 0.1
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "s-direct": [{"content": ANSWER, "model": "api-model"}],
    "s-adapter": [
        {"content": "The Eiffel Tower is in Lyon, France.", "model": "api-model"},
        {"content": EDIT, "model": "adapter-model"},
    ],
    "s-critic": [
        {"content": "It is in Lyon.", "model": "api-model"},
        {"content": "Wrong city: it is in Paris.", "model": "critic-model"},
        {"content": ANSWER, "model": "api-model"},
    ],
}


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
default_api_key_env = "STREAM_E2E_UNSET_KEY"
timeout_seconds = 10
keepalive_seconds = {KEEPALIVE_SECONDS}
retries = 0  # a failure scripted here is meant to reach the client

{served_toml(up, "s")}"""


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("streaming-e2e") / "config.toml"
    with run_app(path, config_toml(upstream_url)) as (url, _):
        yield url


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0, timeout=10))


def content_of(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def ext_of(chunk: ChatCompletionChunk) -> dict[str, Any]:
    assert chunk.model_extra is not None
    ext: dict[str, Any] = chunk.model_extra["adapter_critic"]
    return ext


@pytest.mark.parametrize("served", list(SCRIPTS))
def test_sdk_streams_each_mode_to_the_non_streamed_answer(served: str, client: OpenAI, up: Upstream) -> None:
    up.script(*SCRIPTS[served])
    completion = client.chat.completions.create(model=served, messages=MESSAGES)
    up.script(*SCRIPTS[served])
    chunks = list(client.chat.completions.create(model=served, messages=MESSAGES, stream=True))

    assert content_of(chunks) == completion.choices[0].message.content == ANSWER
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert {c.model for c in chunks} == {served}
    assert chunks[0].choices[0].delta.role == "assistant"
    last = chunks[-1]  # the last content chunk: the finish reason and the extension
    assert last.choices[0].finish_reason == "stop"
    ext = ext_of(last)
    assert completion.model_extra is not None
    assert ext["intermediate"] == completion.model_extra["adapter_critic"]["intermediate"]
    assert ext["mode"] == served.removeprefix("s-")
    assert all(c.model_extra is None or "adapter_critic" not in c.model_extra for c in chunks[:-1])


@pytest.mark.parametrize("served", list(SCRIPTS))
def test_sdk_include_usage_yields_the_total_over_all_stages(served: str, client: OpenAI, up: Upstream) -> None:
    up.script(*SCRIPTS[served])
    stream = client.chat.completions.create(
        model=served, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    stages = len(SCRIPTS[served])  # every scripted call reports usage 1/2/3
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (stages, 2 * stages, 3 * stages)
    assert ext_of(chunks[-1])["tokens"]["total"] == usage.model_dump(
        include={"prompt_tokens", "completion_tokens", "total_tokens"}
    )
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert content_of(chunks) == ANSWER


def test_critic_asks_for_a_stream_only_on_the_second_pass(client: OpenAI, up: Upstream) -> None:
    up.script(*SCRIPTS["s-critic"])
    list(client.chat.completions.create(model="s-critic", messages=MESSAGES, stream=True))

    assert [c["body"].get("stream") for c in up.calls()] == [None, None, True]
    assert up.calls()[2]["body"]["stream_options"] == {"include_usage": True}


def test_sdk_assembles_streamed_tool_calls(client: OpenAI, up: Upstream) -> None:
    up.script({"content": None, "tool_calls": [TOOL_CALL], "finish_reason": "tool_calls"})
    chunks = list(client.chat.completions.create(model="s-direct", messages=MESSAGES, stream=True))

    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1
    assert calls[0].index == 0
    assert calls[0].id == "call_1"
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_keepalives_are_sent_and_the_sdk_ignores_them(app_url: str, client: OpenAI, up: Upstream) -> None:
    slow = {"content": ANSWER, "first_chunk_delay": 5 * KEEPALIVE_SECONDS}
    up.script(slow)
    raw = httpx.post(f"{app_url}/v1/chat/completions", json={"model": "s-direct", "messages": MESSAGES, "stream": True})
    assert raw.status_code == 200
    events = raw.text.split("\n\n")
    assert events[0] == ": keep-alive"  # really sent, before the first chunk
    assert events.count(": keep-alive") >= 2

    up.script(slow)
    chunks = list(client.chat.completions.create(model="s-direct", messages=MESSAGES, stream=True))
    assert content_of(chunks) == ANSWER
    assert ext_of(chunks[-1])["intermediate"] == {"api": ANSWER}


def test_failure_after_a_keepalive_raises_api_error_in_the_sdk(client: OpenAI, up: Upstream) -> None:
    up.script({"status": 500, "body": '{"error": {"message": "engine crashed"}}', "delay": 5 * KEEPALIVE_SECONDS})
    stream = client.chat.completions.create(model="s-direct", messages=MESSAGES, stream=True)  # 200 + keep-alive
    with pytest.raises(openai.APIError) as raised:
        list(stream)

    assert not isinstance(raised.value, openai.APIStatusError)  # raised from the error event, not a status
    assert "engine crashed" in raised.value.message
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "upstream_error"


def test_upstream_dropping_its_connection_mid_stream_raises_api_error(
    app_url: str, client: OpenAI, up: Upstream
) -> None:
    broken = {"content": ANSWER, "stream_break_after": 3, "stream_drop": True}
    up.script(broken)
    received: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in client.chat.completions.create(model="s-direct", messages=MESSAGES, stream=True):
            received.append(chunk)

    assert content_of(received) == ANSWER[:16]  # what had arrived was relayed, then the error
    assert raised.value.body is not None

    up.script(broken)
    raw = httpx.post(f"{app_url}/v1/chat/completions", json={"model": "s-direct", "messages": MESSAGES, "stream": True})
    events = raw.text.rstrip("\n").split("\n\n")
    assert events[-1].startswith('data: {"error":')
    assert "data: [DONE]" not in events


def test_client_disconnect_aborts_the_upstream_stream(app_url: str, up: Upstream) -> None:
    # 40 pieces, one a second: the upstream would stream for ~40 s unless its request is aborted.
    up.script({"content": "x" * 320, "chunk_delay": 1.0})
    body = {"model": "s-direct", "messages": MESSAGES, "stream": True}
    with (
        httpx.Client(timeout=5) as http,
        http.stream("POST", f"{app_url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()  # held, so it is not closed (and the response with it) before we mean to
        first = next(line for line in lines if line.startswith("data: "))
        assert '"role":"assistant"' in first.replace(" ", "")
        assert up.aborted() == []  # the upstream is still streaming
    # Leaving the block closed the unfinished response, and with it the connection.

    aborted = up.aborted(wait=5)
    assert aborted, "the upstream's stream was not aborted within 5 s of the disconnect"
    assert [call["body"]["model"] for call in aborted] == ["api-model"]
    assert len(up.calls()) == 1


# -- usage where real servers put it: one usage chunk for the client, whatever the upstream sends ---------------


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "include-usage"])
@pytest.mark.parametrize("shape", ["litellm", "every_chunk"])
@pytest.mark.parametrize("served", ["s-direct", "s-critic"])
def test_one_usage_chunk_whatever_the_upstream_sends(
    served: str, shape: str, include_usage: bool, client: OpenAI, up: Upstream
) -> None:
    up.script(*({**reply, "stream_usage": shape} for reply in SCRIPTS[served]))
    options: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client.chat.completions.create(model=served, messages=MESSAGES, stream=True, **options))

    with_usage = [i for i, c in enumerate(chunks) if c.usage is not None]
    finishes = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason is not None]
    assert len(finishes) == 1
    assert content_of(chunks) == ANSWER
    if not include_usage:
        assert with_usage == []
        assert finishes == [len(chunks) - 1]
        return
    assert with_usage == [len(chunks) - 1]  # one, the last, after the one finish chunk
    assert finishes == [len(chunks) - 2]
    assert chunks[-1].choices == []
    stages = len(SCRIPTS[served])  # every scripted call reports 1/2/3 in total, counted once per call
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (stages, 2 * stages, 3 * stages)


@pytest.mark.parametrize("served", ["s-direct", "s-critic"])
def test_an_upstream_answering_json_to_a_stream_request_is_streamed(served: str, client: OpenAI, up: Upstream) -> None:
    completion = {
        "id": "chatcmpl-json",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    json_reply = {"body": json.dumps(completion), "model": "api-model"}
    up.script(*SCRIPTS[served][:-1], json_reply)  # the last call, the one streamed, answers plain JSON
    chunks = list(
        client.chat.completions.create(
            model=served, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert content_of(chunks) == ANSWER
    assert chunks[-2].choices[0].finish_reason == "stop"
    usage = chunks[-1].usage
    stages = len(SCRIPTS[served])
    assert usage is not None and usage.total_tokens == 3 * stages


def test_the_sdk_passes_progress_chunks_through(client: OpenAI, up: Upstream) -> None:
    up.script(*SCRIPTS["s-critic"])
    stream = client.chat.completions.create(
        model="s-critic", messages=MESSAGES, stream=True, extra_body={"x_adapter_critic": {"progress": True}}
    )
    stages, text = [], ""
    for chunk in stream:
        progress = (chunk.model_extra or {}).get("adapter_critic", {}).get("progress")
        if progress:
            stages.append(progress["stage"])  # a chat UI would show "draft done, reviewing…"
        elif chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert stages == ["api_draft", "critic"]
    assert text == ANSWER
