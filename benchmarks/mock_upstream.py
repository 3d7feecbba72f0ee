"""The benchmark's upstream: a raw ASGI app answering every POST with a pre-encoded chat.completion (with usage),
or with a pre-encoded event stream of ~20 events when the body asks for `"stream": true`.

It answers by the requested model: the adapter model with one SEARCH/REPLACE edit, the critic model with a
critique, anything else with the answer. A streamed request with `"user": "paced-<N>"` gets `N` one-token chunks
between the role chunk and the finish and usage chunks (`payloads.paced_events`), each event written on its own and
1 ms after the one before, as a model's tokens arrive (`benchmarks/paced.py`); every other stream is written as
fast as the connection takes it, in bursts. Run it as `uvicorn benchmarks.mock_upstream:app --lifespan off`.
"""

from __future__ import annotations

import asyncio
import functools
import re
from typing import Any

from . import payloads
from .procs import post_body

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_PACED = re.compile(rb'"user":\s*"paced-(\d+)"')
PACE_SECONDS = 0.001


def _answers(model: str, content: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    body = payloads.completion(model, content)
    plain = {"type": "http.response.body", "body": body}
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    events = [{"type": "http.response.body", "body": e, "more_body": True} for e in payloads.sse_events(model, content)]
    events.append({"type": "http.response.body", "body": b"", "more_body": False})
    return {"start": start, "body": plain}, events


_DEFAULT = _answers(payloads.API_MODEL, payloads.ANSWER)
_BY_MODEL = [
    (f'"model":"{payloads.ADAPTER_MODEL}"'.encode(), _answers(payloads.ADAPTER_MODEL, payloads.ADAPTER_REPLY)),
    (f'"model": "{payloads.ADAPTER_MODEL}"'.encode(), _answers(payloads.ADAPTER_MODEL, payloads.ADAPTER_REPLY)),
    (f'"model":"{payloads.CRITIC_MODEL}"'.encode(), _answers(payloads.CRITIC_MODEL, payloads.CRITIC_REPLY)),
    (f'"model": "{payloads.CRITIC_MODEL}"'.encode(), _answers(payloads.CRITIC_MODEL, payloads.CRITIC_REPLY)),
]
_SSE_START = {"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS}


@functools.cache
def paced(chunks: int) -> list[dict[str, Any]]:
    """The ASGI messages of a paced stream of `chunks` token chunks (built once per size)."""
    return [{"type": "http.response.body", "body": e, "more_body": True} for e in payloads.paced_events(chunks)]


async def app(scope: Any, receive: Any, send: Any) -> None:
    body = await post_body(scope, receive, send)
    if body is None:
        return
    plain, events = _DEFAULT
    for marker, answers in _BY_MODEL:
        if marker in body:
            plain, events = answers
            break
    if b'"stream":true' in body or b'"stream": true' in body:
        await send(_SSE_START)
        pace = _PACED.search(body)
        if pace is not None:
            for number, event in enumerate(paced(int(pace.group(1)))):
                if number:
                    await asyncio.sleep(PACE_SECONDS)
                await send(event)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        for event in events:  # one write per event, as an LLM server flushes each chunk
            await send(event)
        return
    await send(plain["start"])
    await send(plain["body"])
