"""The upstream SSE reader on long events and on token streams (`python -m benchmarks.sse_reader [--quick]`).

Rows: one event of 1, 4 and 16 MiB arriving in 16 KiB reads and in one read; a token stream (2,000 small
events, one and eight to a read). Each row times the product's reader (`adapter_critic.upstream.sse.iter_batches`)
against the reader it replaced, kept here as `quadratic_batches` for the comparison: that one searched the
whole unfinished line again on every read, so a long event cost time in proportion to its length squared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable

from adapter_critic.upstream.sse import DONE, StreamIncomplete, iter_batches

Reader = Callable[[AsyncIterator[bytes]], AsyncIterator[list[bytes]]]
PIECE = 16 * 1024


async def quadratic_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """The previous reader, for the baseline: LF line ends only, the buffer searched from its start each read."""
    buffer = bytearray()
    data: list[bytes] = []
    async for chunk in chunks:
        buffer += chunk
        batch: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if line:
                if line.startswith(b"data:"):
                    value = line[5:]
                    data.append(value[1:] if value.startswith(b" ") else value)
                continue
            if not data:
                continue
            payload = b"\n".join(data)
            data.clear()
            if payload.strip() == DONE:
                if batch:
                    yield batch
                return
            batch.append(payload)
        del buffer[:start]
        if batch:
            yield batch
    raise StreamIncomplete


def long_event(mib: int) -> bytes:
    payload = b'{"choices": [{"delta": {"content": "' + b"w" * (mib * 1024 * 1024) + b'"}}]}'
    return b"data: " + payload + b"\n\ndata: [DONE]\n\n"


def token_stream(events: int = 2000, per_read: int = 8) -> list[bytes]:
    event = b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "tok "}}]}\n\n'
    reads = [event * per_read for _ in range(events // per_read)]
    return [*reads, b"data: [DONE]\n\n"]


async def read_all(reader: Reader, parts: list[bytes]) -> int:
    async def chunks() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    return sum([len(batch) async for batch in reader(chunks())])


def timed(reader: Reader, parts: list[bytes], repeats: int) -> float:
    """Median milliseconds to read `parts` through `reader`."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        asyncio.run(read_all(reader, parts))
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def rows(quick: bool) -> list[tuple[str, float, float]]:
    sizes = (1, 4) if quick else (1, 4, 16)
    repeats = 3 if quick else 5
    found = []
    for mib in sizes:
        data = long_event(mib)
        pieces = [data[i : i + PIECE] for i in range(0, len(data), PIECE)]
        for label, parts in ((f"{mib} MiB event, 16 KiB reads", pieces), (f"{mib} MiB event, one read", [data])):
            found.append((label, timed(quadratic_batches, parts, repeats), timed(iter_batches, parts, repeats)))
    for per_read in (1, 8):
        stream = token_stream(per_read=per_read)
        label = f"2,000 token events, {per_read} a read"
        found.append((label, timed(quadratic_batches, stream, 9), timed(iter_batches, stream, 9)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 and 4 MiB only, fewer repeats")
    args = parser.parse_args()
    print(f"{'input':<32} {'previous ms':>12} {'now ms':>9} {'ratio':>7}")
    for label, before, now in rows(args.quick):
        print(f"{label:<32} {before:>12.2f} {now:>9.2f} {before / now:>6.1f}x")


if __name__ == "__main__":
    main()
