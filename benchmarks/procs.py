"""Small helpers the benchmark servers and drivers share: reading a POST's body in raw ASGI (a readiness probe
answered), a free loopback port, and a process's resident memory."""

from __future__ import annotations

import socket
from typing import Any


async def request_body(receive: Any) -> bytes:
    """The whole body of a raw ASGI HTTP request."""
    body = b""
    while True:
        message = await receive()
        chunk: bytes = message.get("body", b"")
        body += chunk
        if not message.get("more_body", False):
            return body


async def answer_probe(send: Any) -> None:
    """A bare 200 `ok`, for readiness probes (any request that is not a POST)."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def post_body(scope: Any, receive: Any, send: Any) -> bytes | None:
    """The body of a POST, for a raw ASGI server; None when the request was something else, already dealt with: a
    readiness probe (any other method) answered, a scope that is not HTTP (lifespan) ignored."""
    if scope["type"] != "http":
        return None
    if scope["method"] != "POST":
        await answer_probe(send)
        return None
    return await request_body(receive)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_kib(pid: int) -> int:
    """Resident set size of `pid` in KiB (0 if /proc does not say)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
