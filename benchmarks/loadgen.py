"""A lean HTTP/1.1 load generator, run in its own process: keep-alive connections, one pre-encoded request,
responses read by content-length or chunked framing; no HTTP library in the way.

Used for time to first byte (which wrk cannot see) and for every figure when wrk is not installed.

    python -m benchmarks.loadgen --url http://127.0.0.1:8000/v1/chat/completions --body-file body.json \
        --requests 1000 --concurrency 16

prints one JSON line: requests, errors, seconds, p50/p99 latency and p50/p99 time to first body byte, in µs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import time
from urllib.parse import urlsplit


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0-100) by nearest rank, as wrk reports it."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


async def _worker(
    host: str, port: int, request: bytes, remaining: list[int], latencies: list[float], ttfbs: list[float]
) -> int:
    errors = 0
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while remaining[0] > 0:
            remaining[0] -= 1
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            first = 0.0
            lower = head.lower()
            if b"transfer-encoding: chunked" in lower:
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    if not first:
                        first = time.perf_counter()
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        break
                    await reader.readexactly(size + 2)
            else:
                at = lower.index(b"content-length:") + 15
                length = int(lower[at : lower.index(b"\r\n", at)])
                await reader.readexactly(length)
                first = time.perf_counter()
            done = time.perf_counter()
            if head[9:12] != b"200":
                errors += 1
            latencies.append((done - started) * 1e6)
            ttfbs.append((first - started) * 1e6)
    finally:
        writer.close()
    return errors


async def run(url: str, body: bytes, requests: int, concurrency: int) -> dict[str, float]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    # `BENCH_AUTHORIZATION`: an `Authorization` header on every request (a server with inbound keys).
    auth = os.environ.get("BENCH_AUTHORIZATION")
    request = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"{f'Authorization: {auth}' + chr(13) + chr(10) if auth else ''}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    remaining = [requests]
    latencies: list[float] = []
    ttfbs: list[float] = []
    started = time.perf_counter()
    errors = await asyncio.gather(
        *(_worker(host, port, request, remaining, latencies, ttfbs) for _ in range(min(concurrency, requests)))
    )
    seconds = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "errors": sum(errors),
        "seconds": seconds,
        "p50_us": percentile(latencies, 50),
        "p99_us": percentile(latencies, 99),
        "mean_us": statistics.fmean(latencies) if latencies else float("nan"),
        "ttfb_p50_us": percentile(ttfbs, 50),
        "ttfb_p99_us": percentile(ttfbs, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    with open(args.body_file, "rb") as f:
        body = f.read()
    coroutine = run(args.url, body, args.requests, args.concurrency)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(coroutine)
    else:
        result = uvloop.run(coroutine)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
