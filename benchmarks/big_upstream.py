"""An upstream that answers with a big completion: `"user": "big-<MiB>"` in the request sets the answer's size.

Plain, one `chat.completion` whose content is that many MiB of prose; streamed, one SSE event carrying the whole
content, then the finish event, a usage event and `[DONE]` (the stream an upstream sends when it flushes once).
Answers are built once per size and kept. Run: `uvicorn benchmarks.big_upstream:app --lifespan off`.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from . import payloads
from .procs import post_body

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_SIZE = re.compile(rb'"user":\s*"big-(\d+)"')
_SENTENCE = "The quick brown fox jumps over the lazy dog while the engineer measures what every request costs. "


def content(mib: int) -> str:
    """`mib` MiB of prose, no secret in it."""
    size = mib * 1024 * 1024
    return (_SENTENCE * (size // len(_SENTENCE) + 1))[:size]


@functools.cache
def plain(mib: int) -> bytes:
    return payloads.completion(payloads.API_MODEL, content(mib))


@functools.cache
def stream(mib: int) -> bytes:
    base = {"id": "chatcmpl-big", "object": "chat.completion.chunk", "created": 1700000000, "model": payloads.API_MODEL}
    choice = {
        "index": 0,
        "delta": {"role": "assistant", "content": content(mib)},
        "logprobs": None,
        "finish_reason": None,
    }
    events = [
        {**base, "choices": [choice]},
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": payloads.USAGE},
    ]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


async def app(scope: Any, receive: Any, send: Any) -> None:
    body = await post_body(scope, receive, send)
    if body is None:
        return
    found = _SIZE.search(body)
    mib = int(found.group(1)) if found else 1
    if b'"stream":true' in body or b'"stream": true' in body:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await send({"type": "http.response.body", "body": stream(mib)})
        return
    data = plain(mib)
    headers = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})
