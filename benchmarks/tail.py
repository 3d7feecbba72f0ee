"""What recording adds to the latency tail, and which part of it (`python -m benchmarks.tail`).

    python -m benchmarks.tail                  # 3 rounds x 10,000 requests per variant at concurrency 1: minutes
    python -m benchmarks.tail --quick          # 1 round x 1,000, to check the harness
    python -m benchmarks.tail --concurrency 16 --variants written,"nice 0"

The mock upstream and the product (`python -m benchmarks.store_parts adapter_critic.asgi:app`, metrics on, one
worker, pinned as in `run.py`) with the run store off, and on (SQLite, capture `full`) cut short where
`store_parts.py` says: `sent` (records encoded for the writer process, each batch's frame made, not sent),
`written` (the whole store, written by its writer process), and with the store writing in the server's process
(`store.writer = "inline"`): `queued` (records taken in batches, then dropped), `rows` (rows made, not written) and
`inline` (the whole store). Each variant is its own server, loaded alone with 2,000 requests of warm-up and then
the batch, one request at a time (`loadgen.py`, the 1.5 KB direct request) or `--concurrency` at once; rounds
alternate the variants. The figures are the medians over rounds of p50 and p99, and p99 over store off's of the
same round. `nice 0` is the whole store with its writer process at the server's own priority, `nice 10` at nice 10
(`store.sqlitefile.WRITER_NICE`: 19), each for a comparison in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import payloads, procs, run  # noqa: E402

VARIANTS = {"store off": None, "sent": "sent", "written": "", "inline": ""}  # name -> STORE_PART
INLINE = ("queued", "rows", "inline")  # variants of the store written in the server's process
# Also measured when named with --variants: the whole store with its writer thread at the server's own priority, and
# at nice 10 instead of `store.sqlitefile.WRITER_NICE` (`store_parts.py` reads it).
MORE_ENV = {"nice 0": {"WRITER_NICE": "0"}, "nice 10": {"WRITER_NICE": "10"}}  # name -> environment (store whole)
MORE_PARTS = {"queued": "queued", "rows": "rows"}  # also measured when named: the inline store cut short
WARM_UP = 2000


def _latencies(
    name: str, part: str | None, workdir: Path, mock: procs.Server, load: run.Load, requests: int, concurrency: int
) -> dict[str, float]:
    """p50 and p99 (µs) of `requests` at `concurrency` through a fresh server of the variant."""
    config = run.product_config(f"http://127.0.0.1:{mock.port}/v1")
    store: dict[str, str] = {"url": "none"}
    if part is not None:
        store = {"url": f"sqlite:///{workdir / (name.replace(' ', '_') + '.sqlite3')}"}
        if name in INLINE:
            store["writer"] = "inline"
    path = workdir / f"{name.replace(' ', '_')}.json"
    path.write_text(json.dumps({**config, "store": store, "telemetry": {"metrics": True}}))
    env = {"ADAPTER_CRITIC_CONFIG": str(path), "ADAPTER_CRITIC_STORE": "", "STORE_PART": part or ""}
    env.update(MORE_ENV.get(name, {}))
    proxy, _ = procs.cpu_layout()
    server = procs.start_server(
        name, ["-m", "benchmarks.store_parts", "adapter_critic.asgi:app"], cpus=proxy, env=env, workdir=workdir
    )
    try:
        procs.wait_all_ready([server])
        load.batch(server.port, "direct", WARM_UP, concurrency)
        measured = load.batch(server.port, "direct", requests, concurrency)
    finally:
        procs.stop_server(server)
    return {"p50": measured["p50_us"], "p99": measured["p99_us"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round x 1,000 requests (a harness check)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=1)
    names = ", ".join([*VARIANTS, *MORE_PARTS, *MORE_ENV])
    parser.add_argument("--variants", help=f"comma-separated, of: {names} (default: the first four)")
    args = parser.parse_args()
    rounds, requests = (1, 1000) if args.quick else (args.rounds, args.requests)
    every = {**VARIANTS, **MORE_PARTS, **dict.fromkeys(MORE_ENV, "")}
    chosen = {name: every[name] for name in args.variants.split(",")} if args.variants else dict(VARIANTS)
    chosen = {"store off": None, **chosen}  # every figure is read against store off's
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory(prefix="adapter-critic-tail-") as folder, procs.stopping() as started:
        workdir = Path(folder)
        body = workdir / "direct.json"
        body.write_bytes(payloads.request_bytes("bench-direct"))
        _, other = procs.cpu_layout()
        mock = started["mock"] = procs.start_server(
            "mock",
            ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
            cpus=other,
            env={},
            workdir=workdir,
        )
        procs.wait_all_ready([mock])
        load = run.Load({"direct": body}, other, use_wrk=False)
        for number in range(rounds):
            print(f"round {number + 1}/{rounds}", file=sys.stderr)
            for name, part in chosen.items():
                figures[name].append(_latencies(name, part, workdir, mock, load, requests, args.concurrency))
    median = statistics.median
    print(f"recording's latency at concurrency {args.concurrency}: µs, median of {rounds} round(s) x {requests} "
          "requests")  # fmt: skip
    print(f"{'variant':<16}{'p50':>8}{'p99':>8}{'p99 - off':>11}")
    for name, rows in figures.items():
        added = median(row["p99"] - off["p99"] for row, off in zip(rows, figures["store off"], strict=True))
        print(f"{name:<16}{median(r['p50'] for r in rows):>8.0f}{median(r['p99'] for r in rows):>8.0f}{added:>11.0f}")


if __name__ == "__main__":
    main()
