"""Time to first byte of a streamed answer in `direct` mode: the upstream called directly vs. through adapter_critic.

Starts, on loopback, a tiny OpenAI-compatible SSE mock (a fixed delay before the first chunk, then a fixed delay
between chunks, like a model server's prefill and decode) and `uvicorn adapter_critic.asgi:app` with a direct-mode
config in front of it, each in its own process. Then it sends the same streaming request N times to each, one at a
time, and prints the median and p90 time to the first body byte and to the end of the stream, and what the relay
adds. The run takes a few seconds.

    python benchmarks/ttfb.py [--requests 30] [--chunks 10] [--first-delay 0.02] [--chunk-delay 0.005]

(`--mock --host H --port N` is how the script runs the mock in its own process.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent
SERVED = "bench-direct"
BODY = {"model": SERVED, "messages": [{"role": "user", "content": "Say something."}], "stream": True}


# -- the mock upstream (its own process) ---------------------------------------------------------


def mock_app(chunks: int, first_delay: float, chunk_delay: float) -> object:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def event(payload: dict[str, object]) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def events(model: str) -> AsyncIterator[bytes]:
        head = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
        await anyio.sleep(first_delay)  # prefill
        yield event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(chunks):
            await anyio.sleep(chunk_delay)  # decode
            yield event({**head, "choices": [{"index": 0, "delta": {"content": f"word{i} "}, "finish_reason": None}]})
        yield event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": 5 + chunks}
        yield event({**head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    async def chat(request: Request) -> StreamingResponse:
        body = json.loads(await request.body())
        return StreamingResponse(events(str(body.get("model"))), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve_mock(args: argparse.Namespace) -> None:
    import uvicorn

    app = mock_app(args.chunks, args.first_delay, args.chunk_delay)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", lifespan="off")  # type: ignore[arg-type]


# -- processes -----------------------------------------------------------------------------------


@contextlib.contextmanager
def server(args: list[str], env: dict[str, str] | None = None) -> Iterator[str]:
    """`python <args> --port N` on loopback; yields its URL once it accepts connections (within 30 s).

    The server binds the port itself (not `--fd`): uvicorn treats an inherited socket as a Unix socket, and the
    connections it accepts then lack `TCP_NODELAY`, which adds Nagle/delayed-ACK stalls of tens of milliseconds.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, *args, "--host", "127.0.0.1", "--port", str(port)], env={**os.environ, **(env or {})}, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args} did not start listening on port {port}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- measuring -----------------------------------------------------------------------------------


@dataclass
class Timing:
    ttfb: float  # seconds to the first body byte
    total: float  # seconds to the end of the stream


def measure(client: httpx.Client, url: str) -> Timing:
    started = time.perf_counter()
    first: float | None = None
    with client.stream("POST", url, json=BODY) as response:
        response.raise_for_status()
        received = b""
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter()
            received += chunk
    ended = time.perf_counter()
    if first is None or not received.rstrip().endswith(b"data: [DONE]"):
        raise RuntimeError(f"{url} did not stream a complete answer: {received[-200:]!r}")
    return Timing(first - started, ended - started)


def run(client: httpx.Client, url: str, requests: int) -> list[Timing]:
    for _ in range(3):  # warm-up: connections, imports, first-call costs
        measure(client, url)
    return [measure(client, url) for _ in range(requests)]


def ms(values: list[float], quantile: float) -> str:
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(quantile * (len(ordered) - 1)))
    return f"{ordered[index] * 1000:8.2f}"


def report(results: dict[str, list[Timing]]) -> None:
    print(f"{'target':<26}{'n':>4}{'TTFB p50':>10}{'TTFB p90':>10}{'total p50':>11}{'total p90':>11}   (ms)")
    for name, timings in results.items():
        ttfb, total = [t.ttfb for t in timings], [t.total for t in timings]
        row = (
            f"{name:<26}{len(timings):>4}{ms(ttfb, 0.5):>10}{ms(ttfb, 0.9):>10}{ms(total, 0.5):>11}{ms(total, 0.9):>11}"
        )
        print(row)
    direct, relayed = results["upstream, directly"], results["through adapter_critic"]
    added = statistics.median(t.ttfb for t in relayed) - statistics.median(t.ttfb for t in direct)
    added_total = statistics.median(t.total for t in relayed) - statistics.median(t.total for t in direct)
    print(f"added by the relay (median): TTFB {added * 1000:.2f} ms, total {added_total * 1000:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=30, help="measured requests per target (default 30)")
    parser.add_argument("--chunks", type=int, default=10, help="content chunks per answer (default 10)")
    parser.add_argument("--first-delay", type=float, default=0.02, help="mock's seconds before the first chunk")
    parser.add_argument("--chunk-delay", type=float, default=0.005, help="mock's seconds between chunks")
    parser.add_argument("--mock", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--host", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mock:
        serve_mock(args)
        return

    mock_args = [__file__, "--mock", "--chunks", str(args.chunks)]
    mock_args += ["--first-delay", str(args.first_delay), "--chunk-delay", str(args.chunk_delay)]
    uvicorn_args = ["-m", "uvicorn", "adapter_critic.asgi:app", "--log-level", "warning"]
    with tempfile.TemporaryDirectory() as tmp, server(mock_args) as mock_url:
        config = Path(tmp) / "bench.toml"
        config.write_text(
            f'default_api_key_env = "ADAPTER_CRITIC_BENCH_NO_KEY"\n\n[served_models.{SERVED}]\nmode = "direct"\n'
            f'api = {{ model = "mock-model", base_url = "{mock_url}/v1" }}\n'
        )
        env = {"ADAPTER_CRITIC_CONFIG": str(config), "ADAPTER_CRITIC_BENCH_NO_KEY": ""}
        with server(uvicorn_args, env=env) as app_url, httpx.Client(timeout=30) as client:
            results = {
                "upstream, directly": run(client, f"{mock_url}/v1/chat/completions", args.requests),
                "through adapter_critic": run(client, f"{app_url}/v1/chat/completions", args.requests),
            }
    print(
        f"direct mode, {args.requests} sequential streaming requests per target; mock upstream: "
        f"{args.first_delay * 1000:.0f} ms to the first chunk, then {args.chunks} chunks "
        f"{args.chunk_delay * 1000:.0f} ms apart"
    )
    report(results)


if __name__ == "__main__":
    main()
