"""Relaying an upstream's event stream: an event that is not a chat completion chunk ends the stream as a 502."""

from __future__ import annotations

import httpx
import pytest

from ..conftest import chat, make_config
from ..helpers import envelope, hostile, nested

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}',
        ('{"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": ' + nested(50_000) + "}]}").encode(),
    ],
)
async def test_hostile_stream_chunk_is_a_502(event: bytes) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        content = b"data: " + event + b"\n\ndata: [DONE]\n\n"
        return httpx.Response(200, content=content, headers={"content-type": "text/event-stream"})

    async with hostile(make_config(), handler) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert "not a chat.completion.chunk" in envelope(response, 502)["message"]
