"""The re2 workflow: the last user question read again in the one API call, which is the client's answer as in
`direct` (streamed live, every choice relayed); images are not sent twice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def rereading(**settings: Any) -> Any:
    return make_config(served_models={"m": {"mode": "re2", "api": API, **settings}})


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_the_question_is_read_again_in_the_one_call(
    serve: AppFactory, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.script(Reply("4", model="api-model"))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi", "name": "ann"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 2 + 2?", "name": "ann"},
    ]
    body = {"model": "m", "messages": messages, "stream": stream, "temperature": 0}
    async with serve(rereading()) as client:
        response = await client.post("/chat/completions", json=body)
    [call] = upstream.calls
    assert call.messages == [
        *messages[:3],  # every other message as it came
        {"role": "user", "content": "What is 2 + 2?\nRead the question again: What is 2 + 2?", "name": "ann"},
    ]
    assert call.body["temperature"] == 0 and call.body.get("stream", False) is stream  # streamed live
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "4"
        ext = chunks[-1]["adapter_critic"]
    else:
        assert response.json()["choices"][0]["message"]["content"] == "4"
        ext = response.json()["adapter_critic"]
    assert ext["intermediate"] == {"reread": "Read the question again: What is 2 + 2?", "api": "4"}
    assert list(ext["tokens"]["stages"]) == ["api"]


async def test_text_parts_are_read_again_and_images_are_not_sent_twice(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply("Two cats.", model="api-model"))
    parts = [{"type": "text", "text": "How many cats?"}, IMAGE]
    async with serve(rereading(reread_lead="Again: ")) as client:
        response = await client.post(
            "/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": parts}]}
        )
    assert response.status_code == 200, response.text
    [sent] = upstream.calls[0].messages
    assert sent["content"] == [*parts, {"type": "text", "text": "\nAgain: How many cats?"}]
    assert json.dumps(sent).count("base64") == 1


async def test_the_last_user_message_is_read_again_after_a_tool_result(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny."},
    ]
    async with serve(rereading()) as client:
        await client.post("/chat/completions", json={"model": "m", "messages": messages})
    sent = upstream.calls[0].messages
    assert sent[0]["content"] == "Weather in Paris?\nRead the question again: Weather in Paris?"
    assert sent[1:] == messages[1:]  # the model sees its turn as it did, with the question it was asked


async def test_without_text_to_read_again_the_messages_go_as_sent(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    image_only = {"model": "m", "messages": [{"role": "user", "content": [IMAGE]}]}
    system_only = {"model": "m", "messages": [{"role": "system", "content": "Say hi."}]}
    async with serve(rereading()) as client:
        first = (await client.post("/chat/completions", json=image_only)).json()
        await client.post("/chat/completions", json=system_only)
    assert upstream.calls[0].messages == image_only["messages"]
    assert upstream.calls[1].messages == system_only["messages"]
    assert "reread" not in first["adapter_critic"]["intermediate"]


async def test_every_choice_of_n_is_relayed(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        for i, text in enumerate(["4", "four"])
    ]
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "api-model", "choices": choices}
    upstream.script(Reply(body=json.dumps(body), model="api-model"))
    async with serve(rereading()) as client:
        data = (await client.post("/chat/completions", json=chat("m", "What is 2 + 2?", n=2))).json()
    assert upstream.calls[0].body["n"] == 2
    assert [c["message"]["content"] for c in data["choices"]] == ["4", "four"]
