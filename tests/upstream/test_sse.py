"""The upstream SSE reader: lines end at CRLF, LF or a lone CR wherever a read splits them; payloads up to
`[DONE]`; a stream cut short is `StreamIncomplete`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapter_critic.upstream.sse import StreamIncomplete, iter_batches

pytestmark = pytest.mark.anyio

EVENTS = [b'{"a": 1}', b'{"b": "two\\nlines"}', b"x", b"y\nz"]  # the last one is sent as two data lines


def stream(ending: bytes, *, done: bool = True) -> bytes:
    e = ending
    text = (
        b": keep-alive" + e + e
        + b"data: " + EVENTS[0] + e + e
        + b"event: message" + e + b"id: 7" + e + b"data:" + EVENTS[1] + e + e
        + b"retry: 10" + e + b"data: x" + e + e
        + b"data: y" + e + b"data: z" + e + e
    )  # fmt: skip
    return text + (b"data: [DONE]" + e + e if done else b"")


async def read(parts: list[bytes]) -> list[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    return [payload async for batch in iter_batches(chunks()) for payload in batch]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
async def test_every_split_of_every_line_ending_reads_the_same(ending: bytes) -> None:
    data = stream(ending)
    assert await read([data]) == EVENTS
    for cut in range(1, len(data)):
        assert await read([data[:cut], data[cut:]]) == EVENTS, cut
    assert await read([data[i : i + 1] for i in range(len(data))]) == EVENTS


async def test_mixed_line_endings_and_a_crlf_split_between_reads() -> None:
    data = b'data: {"a": 1}\r\n\ndata: x\r\r' + b"data: y\n\r\ndata: [DONE]\r\n\r\n"
    assert await read([data]) == [b'{"a": 1}', b"x", b"y"]
    assert await read([b'data: {"a": 1}\r', b"\n\r", b"\n" + data[17:]]) == [b'{"a": 1}', b"x", b"y"]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
async def test_a_stream_without_done_is_incomplete(ending: bytes) -> None:
    with pytest.raises(StreamIncomplete):
        await read([stream(ending, done=False)])


async def test_done_ends_the_stream_even_without_its_blank_line() -> None:
    assert await read([b"data: x\n\ndata: [DONE]\n"]) == [b"x"]
    assert await read([b"data: x\r\rdata: [DONE]\r"]) == [b"x"]


async def test_nothing_after_done_is_read() -> None:
    assert await read([b"data: x\n\ndata: [DONE]\n\ndata: after\n\n"]) == [b"x"]


async def test_a_long_event_in_many_reads_is_one_payload() -> None:
    payload = b'{"content": "' + b"w" * 200_000 + b'"}'
    data = b"data: " + payload + b"\n\ndata: [DONE]\n\n"
    assert await read([data[i : i + 16384] for i in range(0, len(data), 16384)]) == [payload]


async def test_payloads_of_one_read_come_in_one_batch() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\ndata: 2\n\n"
        yield b"data: 3\n\ndata: [DONE]\n\n"

    assert [batch async for batch in iter_batches(chunks())] == [[b"1", b"2"], [b"3"]]


async def test_reads_without_a_line_end_are_kept_until_one_comes() -> None:
    # Reads with no line end wait aside until one comes (here `[DONE]`, without its blank line, ends the stream).
    parts = [b"data: ", b'{"a": ', b"1}", b"\n\ndata: [DO", b"NE", b"]\n"]
    assert await read(parts) == [b'{"a": 1}']
    with pytest.raises(StreamIncomplete):
        await read([b"data: ", b'{"a": 1}'])


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
async def test_a_read_per_event_reads_the_same(ending: bytes) -> None:
    events = [part + ending * 2 for part in stream(ending).split(ending * 2) if part]
    assert await read(events) == EVENTS


async def test_whole_events_read_one_by_one_between_split_ones() -> None:
    parts = [b"data: 1\n\n", b"data:2\n", b"\n", b"data: 3\n\n", b"data:\n\n", b"da", b"ta: 4\n\n", b"data: [DONE]\n\n"]

    async def chunks() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    assert [batch async for batch in iter_batches(chunks())] == [[b"1"], [b"2"], [b"3"], [b""], [b"4"]]
    with pytest.raises(StreamIncomplete):
        await read([b"data: 1\n\n", b"data: 2\n\n"])
