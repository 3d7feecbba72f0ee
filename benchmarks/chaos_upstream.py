"""A chaos upstream for `benchmarks/faults.py`: an OpenAI-compatible chat-completions server on loopback that fails
a share of calls in each of the ways real upstreams fail, delays another share, and answers the rest.

    python -m benchmarks.chaos_upstream --port 8001 --fail 0.3 --delay 0.2 --seed 1

It speaks raw HTTP/1.1 over asyncio (keep-alive, `content-length` request bodies) rather than ASGI, so that it can
also reset a connection (an RST, not a polite close) and cut a body or an event stream short. It answers by model
as `mock_upstream` does (the adapter model with an edit, the critic model with a critique). `GET /_stats` answers
the count of each outcome so far; `GET .../models` answers 200 (deep health checks).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import socket
import struct
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/chaos_upstream.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import payloads

# Failures of any call, and those only a streaming call can have.
FAULTS = (
    "reset",  # the connection is reset (RST) once the request is read
    "hang",  # no answer until the client gives up (its timeout)
    "429",  # rate limited, no Retry-After
    "429-retry-after",  # rate limited, Retry-After: 1
    "500",
    "503",
    "truncated-json",  # 200, a JSON body cut in the middle (with a matching content-length)
    "html-error-page",  # 502 from a proxy, text/html
    "empty-choices",  # 200, a chat.completion with `choices: []`
    "wrong-content-type",  # 200, text/plain (for a stream: a JSON completion instead of events)
)
STREAM_FAULTS = (
    "stream-cut",  # events stop and the connection drops: no [DONE]
    "stream-error-event",  # an `{"error": ...}` event in the middle of the stream
)
_REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Unavailable"}
_HTML = (
    b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"
)


class Chaos:
    def __init__(self, fail: float, delay: float, delay_seconds: float, hang_seconds: float, seed: int) -> None:
        self.fail = fail
        self.delay = delay
        self.delay_seconds = delay_seconds
        self.hang_seconds = hang_seconds
        self.rng = random.Random(seed)
        self.stats: collections.Counter[str] = collections.Counter()

    def outcome(self, stream: bool) -> str:
        draw = self.rng.random()
        if draw < self.fail:
            return self.rng.choice(FAULTS + STREAM_FAULTS if stream else FAULTS)
        if draw < self.fail + self.delay:
            return "delayed"
        return "ok"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client went away
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done with."""
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in lines if h)}
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        if method == "GET":
            payload = json.dumps(dict(self.stats)).encode() if path == "/_stats" else b'{"object":"list","data":[]}'
            await _send(writer, 200, "application/json", payload)
            return True
        request = json.loads(body)
        stream = bool(request.get("stream"))
        model = str(request.get("model"))
        outcome = self.outcome(stream)
        self.stats[outcome] += 1
        self.stats["calls"] += 1
        return await self._answer(outcome, model, stream, reader, writer)

    async def _answer(
        self, outcome: str, model: str, stream: bool, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        content = {payloads.ADAPTER_MODEL: "lgtm", payloads.CRITIC_MODEL: payloads.CRITIC_REPLY}.get(
            model, payloads.ANSWER
        )
        if outcome == "delayed":
            await asyncio.sleep(self.rng.uniform(0, self.delay_seconds))
        if outcome == "reset":
            _reset(writer)
            return False
        if outcome == "hang":
            # Until the client gives up and closes (EOF), or `hang_seconds`.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(1), self.hang_seconds)
            _reset(writer)
            return False
        if outcome in ("429", "429-retry-after", "500", "503"):
            status = int(outcome[:3])
            extra = {"retry-after": "1"} if outcome != "429" else {}
            error = {"error": {"message": f"chaos {outcome}", "type": "server_error", "param": None, "code": None}}
            await _send(writer, status, "application/json", json.dumps(error).encode(), extra)
            return True
        if outcome == "truncated-json":
            full = payloads.completion(model, content)
            await _send(writer, 200, "application/json", full[: len(full) // 2])
            return True
        if outcome == "html-error-page":
            await _send(writer, 502, "text/html", _HTML)
            return True
        if outcome == "empty-choices":
            empty = {"id": "chatcmpl-chaos", "object": "chat.completion", "created": 1700000000, "choices": []}
            await _send(writer, 200, "application/json", json.dumps(empty).encode())
            return True
        if outcome == "wrong-content-type":
            if stream:
                await _send(writer, 200, "application/json", payloads.completion(model, content))
            else:
                await _send(writer, 200, "text/plain", b"The model is warming up, please wait.")
            return True
        if not stream:
            await _send(writer, 200, "application/json", payloads.completion(model, content))
            return True
        events = payloads.sse_events(model, content)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        cut = len(events) // 2
        for i, event in enumerate(events):
            if i == cut and outcome == "stream-cut":
                await writer.drain()
                _reset(writer)
                return False
            if i == cut and outcome == "stream-error-event":
                event = b'data: {"error": {"message": "chaos: the model crashed", "type": "server_error"}}\n\n'
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                break
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


async def _send(
    writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes, extra: dict[str, str] | None = None
) -> None:
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: {content_type}\r\n"
    head += f"content-length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in (extra or {}).items())
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with an RST (SO_LINGER 0), as a crashed server or a load balancer does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def main(args: argparse.Namespace) -> None:
    chaos = Chaos(args.fail, args.delay, args.delay_seconds, args.hang_seconds, args.seed)
    server = await asyncio.start_server(chaos.serve, "127.0.0.1", args.port, backlog=1024)
    async with server:
        await server.serve_forever()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fail", type=float, default=0.3, help="share of calls failed (default 0.3)")
    parser.add_argument("--delay", type=float, default=0.2, help="share of calls delayed (default 0.2)")
    parser.add_argument("--delay-seconds", type=float, default=0.2, help="longest delay (default 0.2)")
    parser.add_argument("--hang-seconds", type=float, default=30.0, help="longest hang (default 30)")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse()))
