"""Relayed chunks (`protocols.openai.chunks.ChunkWriter.relayed`): whether a chunk's leading id fields are swapped
as bytes or it is decoded and encoded whole, the client gets the same JSON — the upstream's fields with our id,
object, created and model, and no usage."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter_critic.protocols.openai.chunks import ChunkWriter, _leading, _leading_prefix

COMPACT = b'{"id":"up-1","object":"chat.completion.chunk","created":17,"model":"api-model","system_fingerprint":"fp"'
SPACED = b'{"id": "up-1", "object": "chat.completion.chunk", "created": 17, "model": "api-model", "service_tier": "x"'
LLAMA_CPP = b'{"choices":[],"created":17,"id":"up-1","model":"api-model","object":"chat.completion.chunk"'


def choices(content: str) -> bytes:
    return (
        b', "choices": [{"index": 0, "delta": {"content": %s}, "finish_reason": null}]}' % json.dumps(content).encode()
    )


def expected(payload: bytes, writer: ChunkWriter) -> dict[str, Any]:
    fields = json.loads(payload)
    fields.update(id=writer.completion_id, object="chat.completion.chunk", created=writer.created, model="served")
    fields.pop("usage", None)
    return fields


def events(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(b"\n\n")
    return [json.loads(event.removeprefix(b"data: ")) for event in data.split(b"\n\n")[:-1]]


@pytest.mark.parametrize("head", [COMPACT, SPACED, LLAMA_CPP])
@pytest.mark.parametrize(
    "content",
    ["word ", '"usage": 3', '","id":"evil","model":"x', "\\u0022", "naïve ✓", "", "long ✓ " * 20_000],
)
def test_every_chunk_reads_as_the_rewritten_upstream_chunk(head: bytes, content: str) -> None:
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    stream = [head + choices("first"), head + choices(content), head + b', "usage": {"total_tokens": 3}}']
    stream.append(head.replace(b"up-1", b"up-2") + choices(content))  # an upstream whose id changes mid-stream
    got = events(writer.relayed(stream[:1])) + events(writer.relayed(stream[1:]))
    assert got == [expected(payload, writer) for payload in stream]


def test_the_leading_fields_are_swapped_as_bytes_after_the_first_chunk() -> None:
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    writer.relayed([COMPACT + choices("first")])
    second = writer.relayed([COMPACT + choices("second")])
    # The rest of the upstream's bytes as it sent them: its own spacing after the leading fields is kept.
    assert second.endswith(b'"system_fingerprint":"fp", "choices": [{"index": 0, "delta": {"content": "second"}, '
                           b'"finish_reason": null}]}\n\n')  # fmt: skip
    assert second.startswith(b'data: {"id":"chatcmpl-ours","object":"chat.completion.chunk","created":')


def test_the_first_chunk_is_spliced_as_bytes_too() -> None:
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    first = writer.relayed([SPACED + choices("first")])
    # Read off its first bytes, not decoded and encoded again: the upstream's own spacing is kept after them.
    assert first.endswith(b'"service_tier": "x", "choices": [{"index": 0, "delta": {"content": "first"}, '
                          b'"finish_reason": null}]}\n\n')  # fmt: skip
    assert events(first) == [expected(SPACED + choices("first"), writer)]


_VALUES = {
    "id": st.text(max_size=12).map(json.dumps),
    "object": st.just('"chat.completion.chunk"'),
    "created": st.one_of(st.integers(-(10**12), 10**12).map(str), st.sampled_from(["1.7e9", "null", '"17"'])),
    "model": st.one_of(st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)), st.just("null")),
}


@st.composite
def _heads(draw: st.DrawFn) -> bytes:
    """A chunk's beginning as servers write it: the four fields in any order, compact, spaced or mixed."""
    keys = draw(st.permutations(["id", "object", "created", "model"]))
    style = draw(st.sampled_from(["compact", "spaced", "mixed"]))
    marks = {"compact": st.just((":", ",")), "spaced": st.just((": ", ", "))}.get(
        style, st.tuples(st.sampled_from([":", ": "]), st.sampled_from([",", ", "]))
    )
    fields = ""
    for key in keys:
        colon, comma = draw(marks)
        fields += f'"{key}"{colon}{draw(_VALUES[key])}{comma}'
    return ("{" + fields + draw(st.sampled_from(['"choices":[]}', '"choices": []}', ' "choices":[]}']))).encode()


@given(_heads())
def test_the_leading_fields_read_off_the_first_bytes_are_those_the_decoded_chunk_gives(payload: bytes) -> None:
    decoded = msgspec.json.decode(payload, type=dict[str, msgspec.Raw])
    prefix = _leading_prefix(payload)
    assert prefix is None or prefix == _leading(payload, decoded)
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    assert events(writer.relayed([payload])) == [expected(payload, writer)]


def test_plain_leading_fields_are_read_off_the_first_bytes() -> None:
    for head in (COMPACT, SPACED):
        payload = head + choices("x")
        assert _leading_prefix(payload) == _leading(payload, msgspec.json.decode(payload, type=dict[str, msgspec.Raw]))
        assert _leading_prefix(payload) is not None
    assert _leading_prefix(LLAMA_CPP + choices("x")) is None  # `choices` first: no such beginning


@pytest.mark.parametrize("head", [COMPACT, SPACED])
def test_a_null_usage_closing_every_chunk_as_openai_sends_it_is_spliced_and_any_other_usage_taken_out(
    head: bytes,
) -> None:
    writer = ChunkWriter(completion_id="chatcmpl-ours", served_model="served", include_usage=False)
    spaced = head is SPACED
    null = b', "usage": null}' if spaced else b',"usage":null}'
    body = b', "choices": [{"index": 0, "delta": {"content": "%s"}, "finish_reason": null}]'
    long = b'long \\"usage\\" ' * 10_000  # a chunk of 64 KiB or more is searched another way (`_no_usage`)
    words = (b"one", b"two", b'\\"usage\\"', long)
    tokens = [head + body % word + null for word in words]
    relayed = writer.relayed(tokens)
    assert relayed.count(null + b"\n\n") == 4  # the upstream's own bytes: spliced, not encoded again
    got = events(relayed)
    assert [event["usage"] for event in got] == [None] * 4
    assert [event["choices"][0]["delta"]["content"] for event in got] == [json.loads(b'"%s"' % w) for w in words]
    assert {event["id"] for event in got} == {"chatcmpl-ours"}
    # A usage with counts, or a null one that is not the chunk's end, is taken out as before, short or long.
    for word in (b"three", long):
        counted = head + b', "usage": {"total_tokens": 3}' + body % word + b"}"
        inner = head + b', "usage": null' + body % word + b"}"
        assert [("usage" in event) for event in events(writer.relayed([counted, inner]))] == [False, False]
