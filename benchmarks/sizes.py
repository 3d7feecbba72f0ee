"""Big answers: the product's CPU per request as the answer grows from 1 to 16 MiB, as a ratio to the bare relay's.

    python -m benchmarks.sizes [--quick] [--rounds N] [--json]

`big_upstream.py` answers with 1, 4 or 16 MiB of prose, plain or as one SSE event; the bare relay (`relay.py`),
the product with the run store off, and the product with the SQLite store at capture `full` and metrics on (the
standalone defaults) each serve it, on the same pinned core (the relay with the allocator settings the product
gives itself, `ALLOCATOR`). A round loads every server with every size and
kind, one request at a time (a batch of 32 MiB of answers), in an order that alternates between rounds. CPU is
every thread's time on CPU from schedstat, of the server and of any process it started (a store writer), read
after the store's batch has had time to be written; for the store on, the table splits it between the server's
process and its writer.

The figure that matters is the growth of product / relay from 1 to 16 MiB: a part whose cost is linear in the
answer keeps the ratio flat, a super-linear one makes it grow (the target: at most 10 %).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import payloads, procs, report, run

MIB = (1, 4, 16)
KINDS = ("plain", "stream")
SERVERS = ("relay", "store off", "store on")
GROWTH = 1.10  # product / relay at 16 MiB over at 1 MiB
# The relay gets the glibc thresholds the standalone server sets for itself (`adapter_critic.asgi.tune_allocator`):
# with glibc's defaults its own CPU per MiB of a plain answer went from 1.1 ms at 1 MiB to 3.6 at 16 (page faults),
# which made product / relay a figure about glibc.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(128 * 1024 * 1024)}


def process_cpu(pid: int) -> float:
    """Seconds on CPU of every live thread of `pid` and of its child processes (schedstat, ns)."""
    total = procs.cpu_seconds_precise(pid)
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(process_cpu(int(child)) for child in f.read().split())
    return total


@contextlib.contextmanager
def servers(workdir: Path, proxy: list[int] | None, other: list[int] | None) -> Iterator[dict[str, procs.Server]]:
    with procs.stopping() as started:
        mock = started["mock"] = procs.start_server(
            "mock", ["-m", "uvicorn", "benchmarks.big_upstream:app", "--lifespan", "off"],
            cpus=other, env={}, workdir=workdir,
        )  # fmt: skip
        url = f"http://127.0.0.1:{mock.port}/v1"
        started["relay"] = procs.start_server(
            "relay", ["-m", "uvicorn", "benchmarks.relay:app", "--lifespan", "off"],
            cpus=proxy, env={"FLOOR_UPSTREAM": url, **ALLOCATOR}, workdir=workdir,
        )  # fmt: skip
        for name, store, metrics in (("store off", "none", False), ("store on", "sqlite", True)):
            config = run.product_config(url)
            config["max_upstream_response_bytes"] = 64 * 1024 * 1024
            config["max_body_bytes"] = 64 * 1024 * 1024
            if store == "sqlite":
                config["store"] = {"url": f"sqlite:///{workdir / 'runs.sqlite3'}", "capture": "full"}
            config["telemetry"] = {"metrics": metrics}
            path = workdir / f"{name.replace(' ', '_')}.json"
            path.write_text(json.dumps(config))
            started[name] = procs.start_server(
                name, ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy,
                env={"ADAPTER_CRITIC_CONFIG": str(path), "ADAPTER_CRITIC_STORE": ""}, workdir=workdir,
            )  # fmt: skip
        procs.wait_all_ready(started.values())
        yield started


def body(mib: int, stream: bool) -> bytes:
    fields = json.loads(payloads.request_bytes("bench-direct", stream=stream))
    fields["user"] = f"big-{mib}"
    return json.dumps(fields).encode()


def request(port: int, data: bytes) -> int:
    """One request; the answer's length (checked by the caller)."""
    status, got = procs.post(port, "/v1/chat/completions", data, timeout=120)
    if status != 200:
        raise SystemExit(f"HTTP {status}: {got[:300]!r}")
    return len(got)


def batch(server: procs.Server, mib: int, stream: bool, settle: float) -> tuple[float, float]:
    """CPU µs per request over a batch of 32 MiB of answers, one request at a time: of the server and the processes
    it started (its store's writer), and of the server's process alone."""
    data = body(mib, stream)
    count = max(2, 32 // mib)
    before, own = process_cpu(server.pid), procs.cpu_seconds_precise(server.pid)
    for _ in range(count):
        if request(server.port, data) < mib * 1024 * 1024:
            raise SystemExit(f"{server.name}: a {mib} MiB answer came back short")
    time.sleep(settle)  # the store's writer takes its batch within 100 ms
    total = (process_cpu(server.pid) - before) / count * 1e6
    return total, (procs.cpu_seconds_precise(server.pid) - own) / count * 1e6


def measure(rounds: int, settle: float) -> dict[str, Any]:
    proxy, other = procs.cpu_layout()
    if other:
        os.sched_setaffinity(0, other)
    cpu: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="adapter-critic-sizes-") as tmp, servers(Path(tmp), proxy, other) as up:
        for name in SERVERS:  # warm up: every size once
            for mib in MIB:
                for kind in KINDS:
                    request(up[name].port, body(mib, kind == "stream"))
        for number in range(rounds):
            print(f"round {number + 1}/{rounds}", file=sys.stderr)
            order = SERVERS if number % 2 == 0 else SERVERS[::-1]
            for mib in MIB:
                for kind in KINDS:
                    for name in order:
                        total, alone = batch(up[name], mib, kind == "stream", settle)
                        cpu.setdefault(f"{name} {kind} {mib}", []).append(total)
                        own.setdefault(f"{name} {kind} {mib}", []).append(alone)
    medians = {key: statistics.median(values) for key, values in cpu.items()}
    ratios = {}
    for name in SERVERS[1:]:
        for kind in KINDS:
            for mib in MIB:
                ratios[f"{name} {kind} {mib}"] = medians[f"{name} {kind} {mib}"] / medians[f"relay {kind} {mib}"]
    growth = {
        f"{name} {kind}": ratios[f"{name} {kind} 16"] / ratios[f"{name} {kind} 1"]
        for name in SERVERS[1:]
        for kind in KINDS
    }
    own_medians = {key: statistics.median(values) for key, values in own.items()}
    return {"cpu_us": medians, "own_us": own_medians, "ratios": ratios, "growth": growth, "rounds": rounds}


def checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "target": f"product/relay CPU at 16 MiB over at 1 MiB, {key}",
            "value": value,
            "op": "≤",
            "limit": GROWTH,
            "ok": value <= GROWTH,
        }
        for key, value in result["growth"].items()
    ]


def format_table(result: dict[str, Any]) -> str:
    head = "".join(f"{name + ' µs':>14}{'x relay':>9}" for name in SERVERS)
    lines = [f"{'answer':<16}{head}{'(server':>9}{'writer)':>9}"]
    for kind in KINDS:
        for mib in MIB:
            row = f"{kind + f' {mib} MiB':<16}"
            for name in SERVERS:
                ratio = result["ratios"].get(f"{name} {kind} {mib}")
                row += f"{result['cpu_us'][f'{name} {kind} {mib}']:>14.0f}{'' if ratio is None else f'{ratio:.2f}':>9}"
            stored = f"store on {kind} {mib}"
            if stored in result.get("own_us", {}):  # the store on's CPU, the server's process and its writer's
                alone = result["own_us"][stored]
                row += f"{alone:>9.0f}{result['cpu_us'][stored] - alone:>9.0f}"
            lines.append(row)
    lines += [report.verdict(c) for c in checks(result)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round, to check the harness")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for run.py)")
    args = parser.parse_args()
    result = measure(1 if args.quick else args.rounds, settle=0.3)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
