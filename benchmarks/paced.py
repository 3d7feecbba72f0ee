"""Paced streams: what each streamed token costs the product next to the bare relay, when tokens arrive one at a
time, as a model sends them to many concurrent chat clients.

    python -m benchmarks.paced [--quick] [--rounds N] [--json] [--against TREE]

The mock upstream (`mock_upstream.py`, `"user": "paced-<N>"`) streams the role chunk, N one-token chunks, the finish
and usage chunks and `[DONE]`, each its own write, 1 ms after the one before: every upstream read holds one chunk.
The bare relay (`relay.py`) and the product (store and metrics off, direct, streamed; `run.product_config`) serve
it on the same pinned core, the mock and the load generator (`loadgen.py`, which finishes every request it starts)
on the other(s). Each round loads both with N = 0, 20, 200 and 2,000 at concurrency `CONCURRENCY`, in an order that
alternates between rounds, each batch a few seconds long.

Figures, each the median over the rounds: utime and stime per request from `/proc/<pid>/stat` (the time the server's
own code ran, and the kernel's for it: its reads, writes and polls), and per chunk at N, `(per request at N - per
request at 0) / N` — what N more chunks cost, the request's fixed cost taken out. The targets: per chunk, the
product's CPU and its system time at most `PER_CHUNK` times the relay's at 20, 200 and 2,000 chunks; per request, the
product's CPU at most `PER_REQUEST` times the relay's (the streamed target `run.py` checks with chunks in bursts).
With `--against TREE`, the product of another source tree (a `git worktree` of an earlier commit, given the same
config) is loaded in the same rounds as `against`, to compare commits.
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

CHUNKS = (0, 20, 200, 2000)  # token chunks per stream; 0 is the fixed cost the others are read against
MEASURED = CHUNKS[1:]
SERVERS = ("relay", "product")
CONCURRENCY = 8
CHUNKS_PER_BATCH = 19_200  # 960 requests of 20 chunks, 96 of 200, 16 of 2,000: each batch a few seconds
PER_CHUNK = 1.3  # product / relay, CPU and system time per chunk
PER_REQUEST = 2.2  # product / relay, CPU per streamed request


def body(chunks: int) -> bytes:
    fields = payloads.request("bench-direct", stream=True)
    fields["user"] = f"paced-{chunks}"
    return json.dumps(fields).encode()


def requests_per_batch(chunks: int, quick: bool) -> int:
    total = CHUNKS_PER_BATCH // (4 if quick else 1)
    return max(CONCURRENCY * (1 if quick else 2), total // max(chunks, 20))


@contextlib.contextmanager
def servers(
    workdir: Path, proxy: list[int] | None, other: list[int] | None, against: Path | None = None
) -> Iterator[dict[str, procs.Server]]:
    with procs.stopping() as started:
        mock = started["mock"] = procs.start_server(
            "mock", ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
            cpus=other, env={}, workdir=workdir,
        )  # fmt: skip
        url = f"http://127.0.0.1:{mock.port}/v1"
        started["relay"] = procs.start_server(
            "relay", ["-m", "uvicorn", "benchmarks.relay:app", "--lifespan", "off"],
            cpus=proxy, env={"FLOOR_UPSTREAM": url}, workdir=workdir,
        )  # fmt: skip
        config = workdir / "config.json"
        config.write_text(json.dumps(run.product_config(url)))
        started["product"] = procs.start_server(
            "product", ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy,
            env={"ADAPTER_CRITIC_CONFIG": str(config)}, workdir=workdir,
        )  # fmt: skip
        if against is not None:
            started["against"] = procs.start_server(
                "against", ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy,
                env={"ADAPTER_CRITIC_CONFIG": str(config), "PYTHONPATH": str(against.resolve() / "src")},
                workdir=workdir,
            )  # fmt: skip
        procs.wait_all_ready(started.values())
        yield started


def check(server: procs.Server, chunks: int) -> None:
    """One paced request: every token arrives and the stream ends with `[DONE]`."""
    status, got = procs.post(server.port, "/v1/chat/completions", body(chunks))
    if status != 200 or run.streamed_text(got) != payloads.PACED_TOKEN * chunks:
        raise SystemExit(
            f"{server.name}: a paced stream of {chunks} chunks came back wrong: HTTP {status} {got[:300]!r}"
        )
    if not got.rstrip().endswith(b"data: [DONE]"):
        raise SystemExit(f"{server.name}: the paced stream did not end with [DONE]")


def batch(load: run.Load, server: procs.Server, chunks: int, requests: int) -> dict[str, float]:
    """utime, stime and their sum per request, µs, over one batch at `CONCURRENCY`."""
    user0, system0 = procs.cpu_split(server.pid)
    done = load.batch(server.port, f"paced-{chunks}", requests, CONCURRENCY)
    user1, system1 = procs.cpu_split(server.pid)
    served = done["requests"]
    user, system = (user1 - user0) / served * 1e6, (system1 - system0) / served * 1e6
    return {"user": user, "system": system, "cpu": user + system}


def measure(rounds: int, quick: bool, against: Path | None = None) -> dict[str, Any]:
    names = (*SERVERS, "against") if against is not None else SERVERS
    proxy, other = procs.cpu_layout()
    if other:
        os.sched_setaffinity(0, other)
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="adapter-critic-paced-") as tmp:
        workdir = Path(tmp)
        files = {}
        for chunks in CHUNKS:
            files[f"paced-{chunks}"] = workdir / f"paced-{chunks}.json"
            files[f"paced-{chunks}"].write_bytes(body(chunks))
        load = run.Load(files, other, use_wrk=False)
        with servers(workdir, proxy, other, against) as up:
            for name in names:
                for chunks in CHUNKS:
                    check(up[name], chunks)
                load.batch(up[name].port, "paced-20", 4 * CONCURRENCY, CONCURRENCY)  # warm-up
            for number in range(rounds):
                print(f"paced round {number + 1}/{rounds}", file=sys.stderr)
                order = names if number % 2 == 0 else names[::-1]
                for chunks in CHUNKS:
                    for name in order:
                        row = batch(load, up[name], chunks, requests_per_batch(chunks, quick))
                        for kind, value in row.items():
                            figures.setdefault(f"{name} {chunks} {kind}", []).append(value)
                    time.sleep(0.1)
    per_request = {key: statistics.median(values) for key, values in figures.items()}
    per_chunk = {}
    for name in names:
        for chunks in MEASURED:
            for kind in ("user", "system", "cpu"):
                extra = [
                    (at_n - at_0) / chunks
                    for at_n, at_0 in zip(figures[f"{name} {chunks} {kind}"], figures[f"{name} 0 {kind}"], strict=True)
                ]
                per_chunk[f"{name} {chunks} {kind}"] = statistics.median(extra)
    return {
        "per_request_us": per_request,
        "per_chunk_us": per_chunk,
        "rounds": rounds,
        "servers": list(names),
        "concurrency": CONCURRENCY,
        "requests": {chunks: requests_per_batch(chunks, quick) for chunks in CHUNKS},
    }


def checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    request, chunk = result["per_request_us"], result["per_chunk_us"]
    rows: list[tuple[str, float, float]] = []
    for chunks in MEASURED:
        rows.append((f"direct stream, paced, {chunks} chunks: CPU/request vs the bare aiohttp relay",
                     request[f"product {chunks} cpu"] / request[f"relay {chunks} cpu"], PER_REQUEST))  # fmt: skip
    for chunks in MEASURED:
        for kind, label in (("cpu", "CPU"), ("system", "system time")):
            ratio = _ratio(chunk[f"product {chunks} {kind}"], chunk[f"relay {chunks} {kind}"])
            rows.append((f"paced chunk at {chunks} chunks: {label} per chunk vs the bare relay's", ratio, PER_CHUNK))
    return [
        {"target": name, "value": value, "op": "≤", "limit": limit, "ok": value <= limit} for name, value, limit in rows
    ]


def _ratio(value: float, floor: float) -> float:
    return value / floor if floor > 0 else float("inf")


def format_table(result: dict[str, Any]) -> str:
    request, chunk = result["per_request_us"], result["per_chunk_us"]
    names = result.get("servers", SERVERS)
    head = f"{'':<22}" + "".join(f"{f'{name} {kind}':>15}" for name in names for kind in ("user", "sys", "cpu"))
    lines = [
        f"paced streams (benchmarks/paced.py): one chunk per upstream read, 1 ms apart, concurrency "
        f"{result['concurrency']}, median of {result['rounds']} round(s); µs",
        head + f"{'x relay cpu':>13}{'x relay sys':>13}" + (f"{'x against cpu':>15}" if "against" in names else ""),
    ]
    for label, figures, sizes in (("per request", request, CHUNKS), ("per chunk", chunk, MEASURED)):
        for chunks in sizes:
            row = f"{f'{label}, {chunks} chunks':<22}"
            for name in names:
                row += "".join(f"{figures[f'{name} {chunks} {kind}']:>15.1f}" for kind in ("user", "system", "cpu"))
            for kind in ("cpu", "system"):
                row += f"{_ratio(figures[f'product {chunks} {kind}'], figures[f'relay {chunks} {kind}']):>13.2f}"
            if "against" in names:
                row += f"{_ratio(figures[f'product {chunks} cpu'], figures[f'against {chunks} cpu']):>15.2f}"
            lines.append(row)
    lines += [report.verdict(c) for c in checks(result)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round of smaller batches, to check the harness")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for run.py)")
    parser.add_argument("--against", type=Path, help="also load the product of this source tree (an earlier commit)")
    args = parser.parse_args()
    result = measure(args.rounds or (1 if args.quick else 3), args.quick, args.against)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
