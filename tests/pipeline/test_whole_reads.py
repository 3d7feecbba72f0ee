"""Reads of whole events passed on undecoded: which reads the SSE reader hands on as they came, which of them the
relay lets through once it knows the shape of the upstream's token chunks (and which it decodes), the answer's text
read from the kept text at the end, in order, and the chat-completions writer's splice, the same chunks decoding each
would have written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from adapter_critic.core import StageTarget
from adapter_critic.errors import UpstreamError
from adapter_critic.events import AnswerChunks, payloads_of
from adapter_critic.pipeline.relay import LEARN_TRIES, Relay
from adapter_critic.protocols.openai.chunks import ChunkWriter
from adapter_critic.redact import Secrets
from adapter_critic.upstream.sse import Piece, iter_batches, whole_events

pytestmark = pytest.mark.anyio

HEAD = b'{"id":"up-1","object":"chat.completion.chunk","created":7,"model":"m",'


def event(rest: bytes, head: bytes = HEAD) -> bytes:
    return b"data: " + head + rest + b"\n\n"


def token(text: str) -> bytes:
    return event(b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}' % text.encode())


ROLE = event(b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}')
FINISH = event(b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
USAGE = event(b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}')


async def batches(reads: list[bytes]) -> list[list[bytes] | bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    return [batch async for batch in iter_batches(chunks(), whole=True)]


async def test_reads_of_whole_events_come_as_they_came_and_the_rest_as_payloads() -> None:
    two = token("a") + token("b")
    got = await batches([two, b": keep-alive\n\n", token("c")[:20], token("c")[20:], b"data: [DONE]\n\n"])
    # The keep-alive read has no payload; an event a read splits comes in pieces (tests/pipeline/test_pieces.py).
    assert got == [two, Piece(token("c")[:20], 1), Piece(token("c")[20:-2], 3)]
    assert not whole_events(token("a").replace(b"\n\n", b"\r\n\r\n"))  # CRLF: read line by line
    assert not whole_events(b"data: [DONE]\n\n")
    assert not whole_events(token("a") + b"event: x\ndata: {}\n\n")  # a second line in an event
    assert not whole_events(token("a") + b": comment\n\n")


async def relayed(reads: list[bytes], *, first: bool = True) -> tuple[Relay, list[AnswerChunks]]:
    sent: list[AnswerChunks] = []

    async def sink(chunks: AnswerChunks) -> None:
        sent.append(chunks)

    relay = Relay("final", StageTarget("m", "http://127.0.0.1:9"), first=first, sink=sink, secrets=Secrets(()))
    for batch in await batches([*reads, b"data: [DONE]\n\n"]):
        await relay.feed(batch)
    await relay.close()
    return relay, sent


async def test_token_reads_pass_undecoded_and_the_answer_is_read_from_them_in_order() -> None:
    reads = [ROLE, token("Hel"), token("lo") + token(", "), token("world"), FINISH + USAGE]
    relay, sent = await relayed(reads)
    # The role chunk and the first token are decoded (the second says what a token chunk looks like); the token
    # reads after it pass as they came.
    assert [chunks.raw for chunks in sent] == [None, None, reads[2], reads[3], None]
    head, tail = sent[2].shape
    assert head == b"data: " + HEAD + b'"choices":[{"index":0,"delta":{"content":"'
    assert tail == b'"},"finish_reason":null}]}\n\n'
    assert sent[-1].finish == FINISH[6:-2]  # the finish chunk is still held back for the tail
    answer = relay.answer()
    assert (answer.content, answer.finish_reason) == ("Hello, world", "stop")
    assert relay.usage is not None and relay.usage.total_tokens == 5


@pytest.mark.parametrize(
    "read",
    [
        event(b'"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}'),
        event(b'"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":{"prompt_tokens":1}}'),
        event(b'"error":{"message":"overloaded"}}'),
        token("x").replace(b"up-1", b"up-2"),
        token('say \\"x\\"'),  # a quote in the text: one string or two cannot be told without reading it
        token("x") + b": keep-alive\n\n",  # not whole events alone
    ],
    ids=["finish", "usage", "error", "other-id", "quote", "broken"],
)
async def test_a_read_the_relay_must_act_on_is_decoded(read: bytes) -> None:
    try:
        relay, sent = await relayed([ROLE, token("a"), token("b"), read])
    except UpstreamError as exc:
        assert "overloaded" in exc.message
        return
    assert sent[2].raw == token("b") and all(chunks.raw is None for chunks in sent[3:])
    assert relay.content.startswith("ab")


async def test_text_decoded_and_text_passed_keep_their_order() -> None:
    usage_midway = event(b'"choices":[{"index":0,"delta":{"content":"3"}}],"usage":{"prompt_tokens":1}}')
    relay, sent = await relayed([ROLE, token("1"), token("2"), usage_midway, token("4"), token("\\u00e9")])
    assert [chunks.raw is not None for chunks in sent[:5]] == [False, False, True, False, True]
    assert relay.content == "1234\u00e9"


async def test_a_later_call_decodes_until_its_answer_starts() -> None:
    """Not the run's first call: the role chunk waits for content, so reads are decoded until content went out."""
    _, sent = await relayed([ROLE, token("a"), token("b")], first=False)
    assert [chunks.raw is not None for chunks in sent[:2]] == [False, True]
    assert sent[0].payloads == [ROLE[6:-2], token("a")[6:-2]]


async def test_a_shape_the_text_cannot_be_found_in_is_not_learnt() -> None:
    """Text the upstream escapes otherwise than msgspec (`\\u0061` for `a`): no shape, every chunk decoded; after
    `LEARN_TRIES` such chunks the relay stops looking."""
    escaped = [token(f"\\u00{code:x}") for code in range(0x61, 0x61 + LEARN_TRIES)]
    relay, sent = await relayed([ROLE, *escaped, token("y"), token("z")])
    assert all(chunks.raw is None for chunks in sent)
    assert relay.content == "abcdyz"


async def test_text_that_is_not_json_fails_the_answer_when_it_is_read() -> None:
    not_utf8 = event(b'"choices":[{"index":0,"delta":{"content":"\xff"},"finish_reason":null}]}')
    relay, sent = await relayed([ROLE, token("a"), not_utf8])
    assert sent[2].raw == not_utf8  # passed on as it came
    with pytest.raises(UpstreamError, match=r"not a chat\.completion\.chunk"):
        relay.answer()


@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced"])
async def test_the_splice_writes_the_chunks_decoding_each_would(spaced: bool) -> None:
    def styled(read: bytes) -> bytes:
        return read.replace(b'":', b'": ').replace(b'",', b'", ') if spaced else read

    read = styled(token("Hel") + token("lo") + token("\\u00e9"))
    _, sent = await relayed([styled(ROLE), styled(token("a")), read])
    passed = [chunks for chunks in sent if chunks.raw is not None]
    assert [chunks.raw for chunks in passed] == [read]
    spliced = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    decoded = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    raw = passed[0].raw
    assert raw is not None
    ours = spliced.spliced(passed[0])
    theirs = decoded.relayed(payloads_of(raw))
    assert [json.loads(line[6:]) for line in ours.split(b"\n\n")[:-1]] == [
        json.loads(line[6:]) for line in theirs.split(b"\n\n")[:-1]
    ]
    assert b"up-1" not in ours and ours.count(b'"chatcmpl-ours"') == 3
