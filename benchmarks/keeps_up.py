"""Whether the run store keeps up with a saturated server (`python -m benchmarks.keeps_up [--requests N]`).

The mock upstream and the product (`python -m benchmarks.store_parts adapter_critic.asgi:app`: the standalone
server, SQLite store at capture `full`, metrics on, pinned as in `run.py`) given N direct requests at concurrency 16
in one go (60,000 by default: half a minute with the core saturated, far more than the store's queue of 10,000
records holds). Prints how many requests were answered, how many runs the store holds once the server has stopped
(its queue drained), and `adapter_critic_store_dropped_records_total`: a store that keeps up drops none.
The store writes through its writer process (`store.writer`, the default); `--writer inline` writes in the
server's process instead, and `--writer-nice N` sets that writer thread's priority (`store.sqlitefile.WRITER_NICE`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import payloads, procs, run  # noqa: E402

DROPPED = "adapter_critic_store_dropped_records_total"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60_000)
    parser.add_argument("--writer", choices=("process", "inline"), default="process", help="the store's `writer`")
    parser.add_argument("--writer-nice", type=int, help="the SQLite writer thread's nice value over the server's")
    args = parser.parse_args()
    proxy, other = procs.cpu_layout()
    if other:
        os.sched_setaffinity(0, other)
    with tempfile.TemporaryDirectory(prefix="adapter-critic-keeps-up-") as folder, procs.stopping() as started:
        workdir = Path(folder)
        body = workdir / "direct.json"
        body.write_bytes(payloads.request_bytes("bench-direct"))
        mock = started["mock"] = procs.start_server(
            "mock", ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
            cpus=other, env={}, workdir=workdir,
        )  # fmt: skip
        procs.wait_all_ready([mock])
        database = workdir / "runs.sqlite3"
        config = workdir / "config.json"
        product = run.product_config(f"http://127.0.0.1:{mock.port}/v1")
        store = {"url": f"sqlite:///{database}", "writer": args.writer}
        config.write_text(json.dumps({**product, "store": store, "telemetry": {"metrics": True}}))
        env = {"ADAPTER_CRITIC_CONFIG": str(config), "ADAPTER_CRITIC_STORE": ""}
        if args.writer_nice is not None:
            env["WRITER_NICE"] = str(args.writer_nice)
        server = started["product"] = procs.start_server(
            "product", ["-m", "benchmarks.store_parts", "adapter_critic.asgi:app"], cpus=proxy, env=env, workdir=workdir
        )
        procs.wait_all_ready([server])
        load = run.Load({"direct": body}, other, use_wrk=shutil.which("wrk") is not None)
        began = time.monotonic()
        done = load.batch(server.port, "direct", args.requests, 16)
        seconds = time.monotonic() - began
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        dropped = next(
            float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(DROPPED)
        )  # fmt: skip
        procs.stop_server(server)  # drains the queue
        with contextlib.closing(sqlite3.connect(database)) as conn:
            stored = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    print(f"{done['requests']:.0f} requests at concurrency 16 in {seconds:.1f} s; runs stored: {stored}; "
          f"records dropped: {dropped:.0f} (writer: {args.writer})")  # fmt: skip


if __name__ == "__main__":
    main()
