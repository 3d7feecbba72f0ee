"""Rendering the reviewers' prompts: whatever a request could carry renders, nested values too deep to encode as a
placeholder, so no later stage fails on what decoding let through."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from adapter_critic.request.decode import Message
from adapter_critic.workflows.prompts import render_conversation, render_tool_calls

from ..conftest import make_config
from ..helpers import completion, hostile, nested, sse

pytestmark = pytest.mark.anyio


async def shallow_upstream(request: httpx.Request) -> httpx.Response:
    """An upstream that answers without parsing the request (a deep one would crash Python's `json`)."""
    if b'"stream":true' in request.content:
        return sse({"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]})
    return httpx.Response(200, json=completion("lgtm"))


@pytest.mark.parametrize("model", ["m-adapter", "m-critic"])
async def test_nesting_near_the_limit_never_fails_a_later_stage(model: str) -> None:
    """Values nested near msgspec's limit (the interpreter's recursion limit) are refused or carried through every
    stage — decoding and rendering the reviewer prompts must agree on what is too deep."""
    statuses = set()
    async with hostile(make_config(), shallow_upstream) as client:
        for depth in range(850, 1000, 5):
            deep = nested(depth)
            message = f'{{"role": "user", "content": [{deep}], "tool_calls": [{deep}]}}'
            for stream in ("false", "true"):
                messages = f'[{{"role": "user", "content": "hi"}}, {message}]'
                body = f'{{"model": "{model}", "messages": {messages}, "stream": {stream}}}'
                response = await client.post("/chat/completions", content=body.encode())
                statuses.add(response.status_code)
                if response.status_code == 400:
                    assert "nested too deeply" in response.text
                else:
                    assert response.status_code == 200, response.text
                    assert "server_error" not in response.text
    assert statuses == {200, 400}


def test_prompts_render_what_cannot_be_encoded_as_a_placeholder() -> None:
    """Rendering runs deeper in the stack than decoding: a value that decoded must still render, if only as a mark."""
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    message = Message(role="user", content=[deep], tool_calls=[deep])
    rendered = render_conversation([message])
    assert rendered.count("[nested too deeply to show]") == 2
    assert render_tool_calls([deep]) == "[nested too deeply to show]"
