"""The product's own path in one process: CPU per request of everything between uvicorn and aiohttp, the upstream and
the client faked, so that a change of a microsecond per request or per chunk shows (a server's figures move by more).

    python -m benchmarks.path [--chunks N | --plain] [--requests R] [--tree TREE]

The chat handler (`http.service.compose` with `run.product_config`: store and metrics off) answers the direct served
model through the fast path's `answer`, as uvicorn would call it; `Upstream._post` is replaced by a fake that opens at
once and yields the mock's bytes — a plain completion (`--plain`), or the paced stream of N token chunks
(`payloads.paced_events`), one event per read with a loop iteration between reads, as a model's tokens arrive. The
client's `send` does nothing and its `receive` never says anything. Prints the best of 5 batches, CPU µs per request
(and per chunk over a stream of none, for a stream); `--tree` measures another source tree's `src` (a `git worktree`
of an earlier commit) instead of this checkout's, in a process of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

from benchmarks import payloads, procs, run


def events(chunks: int | None) -> list[bytes]:
    """What the fake upstream reads out: the plain completion (None) or a paced stream of `chunks` chunks."""
    if chunks is None:
        return [payloads.completion(payloads.API_MODEL, payloads.ANSWER)]
    return payloads.paced_events(chunks)


async def measure(chunks: int | None, requests: int, rounds: int = 5) -> float:
    """Best of `rounds` batches of `requests`, CPU µs per request."""
    from adapter_critic.upstream import client

    reads = events(chunks)
    kind = "application/json" if chunks is None else "text/event-stream"

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            await asyncio.sleep(0)  # a read is a wake-up of its own
            yield read

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[tuple[int, dict[str, str], AsyncIterator[bytes]]]:
        yield 200, {"content-type": kind}, body()

    with mock.patch.object(client.Upstream, "_post", lambda self, *args, **kwargs: opened()):
        return await _batches(chunks, requests, rounds)


async def _batches(chunks: int | None, requests: int, rounds: int) -> float:
    from adapter_critic.config.load import load_config
    from adapter_critic.http.fastpath import answer
    from adapter_critic.http.service import compose

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(run.product_config("http://127.0.0.1:9/v1")))
        handler = compose(load_config(path)).handler
    handler.start()
    request = payloads.request_bytes("bench-direct", stream=chunks is not None)
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        pass

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        await handler.respond(request, scope, receive, send)

    async def one() -> None:
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "state": {}}
        await answer(endpoint, scope, receive, send)

    for _ in range(50):
        await one()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(requests):
            await one()
        best = min(best, (time.process_time() - started) / requests * 1e6)
    await handler.close()
    return best


def in_process(tree: Path | None, chunks: int | None, requests: int) -> float:
    """`measure` in a process of its own, on `tree`'s source (None: this checkout's)."""
    env = {**os.environ, "PYTHONPATH": procs.python_path(str(tree.resolve() / "src") if tree else None)}
    flags = ["--plain"] if chunks is None else ["--chunks", str(chunks)]
    command = [sys.executable, "-m", "benchmarks.path", *flags, "--requests", str(requests), "--one"]
    done = subprocess.run(command, env=env, capture_output=True, timeout=600, check=True, cwd=procs.ROOT)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=200, help="token chunks per streamed answer")
    parser.add_argument("--plain", action="store_true", help="a plain answer instead of a stream")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tree", type=Path, help="measure this source tree instead of this checkout")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one figure, in this process
    args = parser.parse_args()
    chunks = None if args.plain else args.chunks
    if args.one:
        import uvloop

        print(f"{uvloop.run(measure(chunks, args.requests)):.2f}")
        return
    if chunks is None:
        print(f"plain direct: {in_process(args.tree, None, args.requests):.1f} µs per request")
        return
    streamed = in_process(args.tree, chunks, args.requests)
    bare = in_process(args.tree, 0, args.requests)
    print(f"direct, {chunks} paced chunks: {streamed:.1f} µs per request, no chunks {bare:.1f}; "
          f"{(streamed - bare) / max(chunks, 1):.2f} µs per chunk")  # fmt: skip


if __name__ == "__main__":
    main()
