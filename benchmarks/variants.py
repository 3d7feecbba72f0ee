"""Variants of the product measured side by side: the harness `benchmarks.store` and `benchmarks.telemetry` share.

Each variant is its own server (the caller's `servers` starts them, the mock first); every round loads every
variant with direct requests, plain and streamed, in a fixed batch at concurrency 16, and the figure is the
server's utime+stime per request — work on its own threads and background tasks included.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks import payloads, run

BODIES = ("direct", "direct-stream")
Figures = dict[tuple[str, str], list[float]]
Servers = Callable[[Path, list[int] | None, list[int] | None], contextlib.AbstractContextManager[dict[str, run.Server]]]


def options(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round x 300 requests: check the harness")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--python-load", action="store_true", help="use benchmarks/loadgen.py even if wrk is installed")
    return parser.parse_args()


def measure(
    args: argparse.Namespace, variants: Sequence[str], servers: Servers, *, prefix: str, settle_seconds: float
) -> tuple[Figures, int, int, str]:
    """Every variant's CPU µs per request, per body and round; and the rounds, batch size and load generator.

    `settle_seconds` after each batch lets the server finish what the batch left (its last records written, the
    requests the load generator abandoned): that work is the batch's cost."""
    rounds, batch, warmup = (1, 300, 50) if args.quick else (5, 3000, 300)
    rounds = args.rounds or rounds
    use_wrk = run.shutil.which("wrk") is not None and not args.python_load
    proxy, other = run.cpu_layout()
    figures: Figures = {(v, b): [] for v in variants for b in BODIES}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(tmp)
        files = {}
        for body in BODIES:
            files[body] = workdir / f"{body}.json"
            files[body].write_bytes(payloads.request_bytes("bench-direct", stream=body.endswith("stream")))
        load = run.Load(files, other, use_wrk)
        with servers(workdir, proxy, other) as started:
            for name in variants:
                for body in BODIES:
                    load.batch(started[name].port, body, warmup, 16)
            for number in range(rounds):
                print(f"round {number + 1}/{rounds}", file=sys.stderr)
                for name in variants:
                    for body in BODIES:
                        server = started[name]
                        before = run.cpu_seconds(server.pid)
                        done = load.batch(server.port, body, batch, 16)
                        time.sleep(settle_seconds)
                        figures[(name, body)].append((run.cpu_seconds(server.pid) - before) / done["requests"] * 1e6)
    return figures, rounds, batch, "wrk" if use_wrk else "benchmarks/loadgen.py"
