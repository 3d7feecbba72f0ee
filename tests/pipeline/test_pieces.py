"""One big event relayed as it arrives: the SSE reader hands an event whose line a read did not end out in pieces,
the relay passes its text on as it comes and reads what followed the text at its end (a finish, usage), and every
client — chat completions, Anthropic Messages, Responses — gets the whole answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapter_critic.core import StageTarget
from adapter_critic.errors import UpstreamError
from adapter_critic.events import AnswerChunks
from adapter_critic.pipeline.relay import Relay
from adapter_critic.protocols.openai import shape
from adapter_critic.protocols.openai.chunks import ChunkWriter
from adapter_critic.redact import Secrets
from adapter_critic.upstream.sse import Piece, iter_batches

from ..conftest import chat, make_config
from ..helpers import hostile

shape_opening = shape.opening

pytestmark = pytest.mark.anyio

HEAD = b'{"id":"up-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
TEXT = 'Quotes \\"and\\" back\\\\slashes\\\\\\\\ \\u00e9 and a long tail ' + "x" * 300
DONE = b"data: [DONE]\n\n"


def big(text: str = TEXT, after: bytes = b'"finish_reason":null}]}', role: bool = True) -> bytes:
    """One event: the role and `text` (JSON string text, as sent) in one delta, then `after`."""
    delta = b'"delta":{"role":"assistant","content":"' if role else b'"delta":{"content":"'
    return b"data: " + HEAD + delta + text.encode() + b'"},' + after + b"\n\n"


FINISH = b'data: {"id":"up-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'  # noqa: E501


async def split(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_an_event_a_read_does_not_end_comes_in_pieces() -> None:
    data = big() + FINISH + DONE
    got = [batch async for batch in iter_batches(split(data, 100), whole=True)]
    pieces = [batch for batch in got if isinstance(batch, Piece)]
    parts = [piece.part for piece in pieces]
    first = parts.index(3) + 1  # the big event's pieces (the finish event after it is split too)
    assert parts[0] == 1 and set(parts[1 : first - 1]) == {2} and parts[first - 1] == 3
    assert b"".join(piece.data for piece in pieces[:first]) == big()[:-2]


async def test_an_event_begun_after_others_in_a_read_comes_in_pieces_from_there() -> None:
    data = FINISH + big() + DONE
    got = [batch async for batch in iter_batches(split(data, len(FINISH) + 50), whole=True)]
    assert got[0] == [FINISH[6:-2]] and got[1] == Piece(big()[:50], 1)
    assert b"".join(batch.data for batch in got if isinstance(batch, Piece)) == big()[:-2]


async def relayed(data: bytes, size: int, *, first: bool = True) -> tuple[Relay, list[AnswerChunks], bytes]:
    """The relay fed `data` in reads of `size`, and what a chat-completions client got (the tail left out)."""
    sent: list[AnswerChunks] = []

    async def sink(chunks: AnswerChunks) -> None:
        sent.append(chunks)

    relay = Relay("final", StageTarget("m", "http://127.0.0.1:9"), first=first, sink=sink, secrets=Secrets(()))
    async for batch in iter_batches(split(data, size), whole=True):
        await relay.feed(batch)
    await relay.close()
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    out = b"".join(
        writer.spliced(chunks) if chunks.raw is not None else writer.relayed(chunks.payloads) for chunks in sent
    )
    return relay, sent, out


def chunks_of(out: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in out.split(b"\n\n")[:-1]]


TEXT_DECODED = json.loads('"' + TEXT + '"')


@pytest.mark.parametrize("size", [64, 97, 128, 1000])
async def test_the_text_goes_on_as_it_comes_wherever_a_read_splits_it(size: int) -> None:
    relay, sent, out = await relayed(big() + FINISH + DONE, size)
    if size < len(big()):  # passed on before the event ended; else a read of whole events, decoded as before
        assert [chunks.part for chunks in sent if chunks.part][:2] == [1, 2]
    assert relay.answer().content == TEXT_DECODED and relay.finish_reason == "stop"
    (chunk,) = chunks_of(out)
    assert chunk["id"] == "chatcmpl-ours" and chunk["model"] == "served"
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": TEXT_DECODED}
    assert sent[-1].finish == FINISH[6:-2]


async def test_a_finish_and_usage_after_the_text_are_read_at_the_end() -> None:
    after = b'"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}'
    relay, sent, out = await relayed(big(after=after) + DONE, 100)
    assert relay.finish_reason == "length" and relay.usage is not None and relay.usage.total_tokens == 12
    (chunk,) = chunks_of(out)  # the text's chunk, closed after it: no finish, no usage
    assert "usage" not in chunk and chunk["choices"][0].get("finish_reason") is None
    finish = json.loads(sent[-1].finish or b"")  # the rest is the finish chunk, for the tail
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"]["content"] == ""
    assert relay.answer().content == TEXT_DECODED


async def test_another_choices_text_is_passed_on_but_not_the_answers() -> None:
    second = big().replace(b'{"index":0,', b'{"index":1,').replace(b"long tail", b"other one")
    relay, _, out = await relayed(big(role=False) + second + FINISH + DONE, 100)
    assert relay.answer().content == TEXT_DECODED
    assert [chunk["choices"][0]["delta"]["content"] for chunk in chunks_of(out)] == [
        TEXT_DECODED,
        TEXT_DECODED.replace("long tail", "other one"),
    ]


async def test_an_event_that_does_not_begin_as_text_is_held_whole() -> None:
    tools = (
        b'data: {"id":"up-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c",'
        + b'"function":{"name":"f","arguments":"'
        + b"a" * 300
        + b'"}}]}}]}\n\n'
    )
    relay, sent, _ = await relayed(tools + FINISH + DONE, 100)
    assert all(chunks.raw is None for chunks in sent)
    calls = relay.answer().tool_calls
    assert calls is not None and calls[0]["function"]["arguments"] == "a" * 300


async def test_an_event_whose_text_never_ends_is_a_bad_answer() -> None:
    broken = b"data: " + HEAD + b'"delta":{"content":"' + b"y" * 300 + b"\n\n" + DONE
    with pytest.raises(UpstreamError, match=r"not a chat\.completion\.chunk"):
        await relayed(broken, 100)


@pytest.mark.parametrize(
    ("path", "body", "text_of"),
    [
        ("/chat/completions", chat("m-direct", stream=True), "chat"),
        (
            "/messages",
            {"model": "m-direct", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": "Q"}]},
            "messages",
        ),
        ("/responses", {"model": "m-direct", "input": "Q", "stream": True}, "responses"),
    ],
    ids=["chat", "messages", "responses"],
)
async def test_every_client_gets_the_whole_text_of_an_event_in_pieces(
    path: str, body: dict[str, Any], text_of: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    openings: list[int] = []  # where the relay found each pieced event's text to begin: it passed in pieces

    def opening(data: bytes) -> int:
        openings.append(found := shape_opening(data))
        return found

    monkeypatch.setattr(shape, "opening", opening)

    class Reads(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for read in split(big() + FINISH + DONE, 64):
                yield read

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Reads(), headers={"content-type": "text/event-stream"})

    async with hostile(make_config(), handler) as client:
        response = await client.post(path, json=body)
    assert response.status_code == 200
    datas = [json.loads(line[6:]) for line in response.text.split("\n") if line.startswith("data: {")]
    if text_of == "chat":
        text = "".join(d["choices"][0]["delta"].get("content") or "" for d in datas if d["choices"])
    elif text_of == "messages":
        text = "".join(d["delta"].get("text", "") for d in datas if d.get("type") == "content_block_delta")
    else:
        text = "".join(d.get("delta", "") for d in datas if d.get("type") == "response.output_text.delta")
    assert text == TEXT_DECODED
    assert any(openings)


async def test_the_answer_in_pieces_is_one_string_for_the_stage_and_the_run() -> None:
    tokens = b"".join(big(f"token {n} ", b'"finish_reason":null}]}', n == 0) for n in range(6))
    relay, _, _ = await relayed(tokens + big() + FINISH + DONE, 100)
    content = relay.content
    assert content == "".join(f"token {n} " for n in range(6)) + TEXT_DECODED
    assert relay.content is content and relay.answer().content is content  # joined once: the store sends it once
