"""Compressed upstream answers: only gzip or identity is asked for, and an answer is limited by its decoded size
while it is decoded, so a small body that inflates to a gigabyte stops at `max_upstream_response_bytes` (§7)
with memory flat. Over real loopback servers, with both transports.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable

import anyio
import anyio.abc
import httpx
import pytest

from adapter_critic import Config, create_app

from ..conftest import asgi_client, chat
from ..helpers import completion, read_request

pytestmark = pytest.mark.anyio

LIMIT = 1024 * 1024
GIB = 1024**3
COMPLETION = completion("inflated", model="api-model")
SSE = (
    b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "inflated"}, "finish_reason": null}]}'
    b'\n\ndata: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)


@functools.cache
def gzip_bomb() -> bytes:
    """A gzip member whose deflate data inflates to 1 GiB of zeros: one 1 MiB block compressed with a full flush
    (so every copy is byte for byte the same), repeated 1024 times. About 1 MB; its trailer is never reached."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = deflate.compress(bytes(1 << 20)) + deflate.flush(zlib.Z_FULL_FLUSH)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * (GIB >> 20) + deflate.flush() + bytes(8)


@functools.cache
def nested_gzip_bomb() -> bytes:
    """`gzip_bomb` gzipped again (`content-encoding: gzip, gzip`): about 2.5 KB that inflate to 1 GiB."""
    return gzip.compress(gzip_bomb(), 9)


def config_for(url: str) -> Config:
    return Config.from_dict(
        {
            "retries": 0,
            "timeout_seconds": 10,
            "max_upstream_response_bytes": LIMIT,
            "served_models": {"m": {"mode": "direct", "api": {"model": "api-model", "base_url": url}}},
        }
    )


# -- a loopback upstream answering fixed bytes ------------------------------------------------------------------------

Answer = Callable[[bool], tuple[dict[str, str], bytes]]  # streamed? -> (headers, body)


class RawUpstream:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.heads: list[dict[str, str]] = []

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            async with stream:
                headers, body = await read_request(stream)
                self.heads.append(headers)
                answer_headers, payload = self.answer(bool(json.loads(body).get("stream")))
                # No content-length: the body ends when the connection closes, so only its decoded size can stop it.
                fields = {"connection": "close", **answer_headers}
                lines = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
                await stream.send(b"HTTP/1.1 200 OK\r\n" + lines.encode() + b"\r\n" + payload)


@contextlib.asynccontextmanager
async def app_over(answer: Answer) -> AsyncIterator[tuple[httpx.AsyncClient, RawUpstream]]:
    """The app with its own upstream client (the transport under test) in front of a loopback upstream."""
    upstream = RawUpstream(answer)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    url = f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}/v1"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, upstream.handle)
        async with asgi_client(create_app(config_for(url))) as client:
            yield client, upstream
        tg.cancel_scope.cancel()


def gzipped(streamed: bool) -> tuple[dict[str, str], bytes]:
    if streamed:
        return {"content-type": "text/event-stream", "content-encoding": "gzip"}, gzip.compress(SSE)
    body = gzip.compress(json.dumps(COMPLETION).encode())
    return {"content-type": "application/json", "content-encoding": "gzip"}, body


def text_of(response: httpx.Response) -> str:
    if not response.headers["content-type"].startswith("text/event-stream"):
        return str(response.json()["choices"][0]["message"]["content"])
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    return "".join(c["delta"].get("content") or "" for event in events for c in event.get("choices", []))


@pytest.mark.parametrize("stream", [False, True])
async def test_upstreams_are_asked_for_gzip_or_identity_only_and_gzip_is_decoded(
    transport_kind: str, stream: bool
) -> None:
    async with app_over(gzipped) as (client, upstream):
        response = await client.post("/chat/completions", json=chat("m", stream=stream))
    assert response.status_code == 200, response.text
    assert text_of(response) == "inflated"
    assert [head["accept-encoding"] for head in upstream.heads] == ["gzip, identity"]


def bomb_error(response: httpx.Response) -> str:
    """The §7 error of an answer over the limit: a 502 before the stream started, or its one error event."""
    if response.status_code == 502:
        error = response.json()["error"]
    else:
        assert response.status_code == 200, response.text
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        error = events[-1]["error"]
        assert "[DONE]" not in response.text
    assert error["type"] == "upstream_error"
    return str(error["message"])


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_gzip_bomb_stops_at_the_limit_with_memory_flat(transport_kind: str, nested: bool, stream: bool) -> None:
    body = nested_gzip_bomb() if nested else gzip_bomb()
    coding = "gzip, gzip" if nested else "gzip"
    kind = "text/event-stream" if stream else "application/json"

    def bomb(streamed: bool) -> tuple[dict[str, str], bytes]:
        return {"content-type": kind, "content-encoding": coding}, body

    assert len(body) < (4096 if nested else 1100 * 1024)
    async with app_over(bomb) as (client, _):
        tracemalloc.start()
        try:
            response = await client.post("/chat/completions", json=chat("m", stream=stream))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    message = bomb_error(response)
    assert f"larger than {LIMIT} bytes (max_upstream_response_bytes)" in message
    # Inflated whole, 1 GiB; a received chunk inflated whole, 16 MiB or more; a bounded piece at a time, the
    # answer read so far (up to the limit) and a few pieces.
    assert peak < 4 * LIMIT, peak


# -- the codings ------------------------------------------------------------------------------------------------------


def answering(headers: dict[str, str], body: bytes) -> Answer:
    def answer(streamed: bool) -> tuple[dict[str, str], bytes]:
        return {"content-type": "application/json", **headers}, body

    return answer


PAYLOAD = json.dumps(COMPLETION).encode()
_raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", gzip.compress(PAYLOAD)),
        ("x-gzip", gzip.compress(PAYLOAD)),
        ("GZIP", gzip.compress(PAYLOAD)),
        ("gzip", gzip.compress(PAYLOAD[:40]) + gzip.compress(PAYLOAD[40:])),  # two gzip members in a row
        ("gzip, gzip", gzip.compress(gzip.compress(PAYLOAD))),
        ("identity, gzip", gzip.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)),
        ("deflate", _raw.compress(PAYLOAD) + _raw.flush()),  # raw deflate, as some servers send it
        ("identity", PAYLOAD),
        ("", PAYLOAD),
    ],
)
async def test_codings_are_decoded(transport_kind: str, coding: str, body: bytes) -> None:
    async with app_over(answering({"content-encoding": coding}, body)) as (client, _):
        response = await client.post("/chat/completions", json=chat("m"))
    assert response.status_code == 200, response.text
    assert text_of(response) == "inflated"


@pytest.mark.parametrize(
    ("coding", "body", "said"),
    [
        ("br", b"\x1b\x00", "content-encoding 'br' was not asked for"),
        ("gzip, zstd", b"\x28\xb5\x2f\xfd", "content-encoding 'zstd' was not asked for"),
        ("gzip", b"\x1f\x8b\x08\x00 not gzip at all", "gzip data is corrupt"),
    ],
)
async def test_unasked_or_corrupt_codings_are_a_502(transport_kind: str, coding: str, body: bytes, said: str) -> None:
    async with app_over(answering({"content-encoding": coding}, body)) as (client, _):
        response = await client.post("/chat/completions", json=chat("m"))
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["type"] == "upstream_error" and said in error["message"]
