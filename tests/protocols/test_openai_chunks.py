"""Relayed chunks (`protocols.openai.chunks.ChunkWriter.relayed`): whether a chunk's leading id fields are swapped
as bytes or it is decoded and encoded whole, the client gets the same JSON — the upstream's fields with our id,
object, created and model, and no usage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter_critic.protocols.openai.chunks import ChunkWriter

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
    ["word ", '"usage": 3', '","id":"evil","model":"x', "\\u0022", "naïve ✓", ""],
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
