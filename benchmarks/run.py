"""The benchmark: adapter_critic against the bare relay and two floor proxies, side by side, in one run.

    python benchmarks/run.py            # full run, a few minutes
    python benchmarks/run.py --quick    # a tiny run (a few hundred requests per figure), under a minute

Processes (each its own uvicorn, one worker, uvloop + httptools, no access log):
- the mock upstream (`benchmarks/mock_upstream.py`), answering pre-encoded completions / event streams;
- the bare relay (`benchmarks/relay.py`), and floor proxies (`benchmarks/floor.py`) over httpx's default transport
  and over httpx-aiohttp;
- the product, `uvicorn adapter_critic.asgi:app` (config in ADAPTER_CRITIC_CONFIG), in direct, adapter and critic
  mode, streaming and not; again with the SQLite run store on (`benchmarks/targets.py`'s `STORED`); and again with
  `httpx_aiohttp` made unimportable (its plain-httpx fallback).
Proxies are pinned to one core, the mock and the load generator to the other(s), where the machine allows.
The load generator is wrk (with `benchmarks/wrk_batch.lua`) when installed, else `benchmarks/loadgen.py`;
time to first byte is always measured with `loadgen.py`.

Figures, each the median over rounds (each round runs every target once, so drift hits all alike):
- CPU µs/request of the proxy process: utime+stime from /proc/<pid>/stat over a fixed batch at concurrency 16;
- req/s at concurrency 16 over that batch;
- added p50/p99 latency at concurrency 1, against calling the mock directly;
- added time to first byte for streaming, at concurrency 1, against the mock's own;
and every product figure as a ratio to the bare relay measured in the same run. The processes are started and
measured with `benchmarks/procs.py`; the figures are read out and printed by `benchmarks/report.py`, after the
micro-benchmarks, an `auto` model's routing per request (`benchmarks/router.py`), the big answers
(`benchmarks/sizes.py`) and the paced streams (`benchmarks/paced.py`: CPU and system time per streamed token, one
chunk per upstream read, 1 ms apart). The table is printed at the end and everything is written to
`benchmarks/results/<timestamp>.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/run.py` as well as `python -m benchmarks.run`
    sys.path.insert(0, str(ROOT))

from benchmarks import micro, paced, payloads  # noqa: E402
from benchmarks import sizes as big_answers  # noqa: E402
from benchmarks import targets as targets_module  # noqa: E402
from benchmarks.procs import (  # noqa: E402
    Server,
    cpu_layout,
    cpu_seconds,
    cpu_seconds_precise,
    own_cpu_seconds,
    pin,
    post,
    python_path,
    rss_kib,
    start_server,
    stopping,
    wait_all_ready,
)
from benchmarks.report import Target, against_baseline, format_table, summarise, verdicts  # noqa: E402

RESULTS = HERE / "results"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    batch: int  # requests per CPU / throughput batch, at concurrency 16
    latency: int  # requests per latency batch, at concurrency 1 (p99 of 2,000 is the 20th worst; of 500, the 5th)
    ttfb: int  # requests per time-to-first-byte batch, at concurrency 1
    warmup: int
    memory_early: int  # RSS is read after this many product requests...
    memory_late: int  # ...and again after at least this many


FULL = Sizes(rounds=3, batch=3000, latency=2000, ttfb=300, warmup=300, memory_early=1000, memory_late=20000)
QUICK = Sizes(rounds=1, batch=300, latency=100, ttfb=50, warmup=50, memory_early=200, memory_late=1000)


# -- targets ------------------------------------------------------------------------------------


def streamed_text(raw: bytes) -> str:
    text = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text


def check(target: Target, bodies: dict[str, bytes], mock_port: int) -> None:
    """One request through the target, checked: floors return the mock's bytes, the product the right answer."""
    status, got = post(target.server.port, "/v1/chat/completions", bodies[target.body])
    if status != 200:
        raise SystemExit(f"{target.name}: HTTP {status}: {got[:500]!r}")
    if target.kind == "floor":
        upstream_body = bodies["mock-stream" if target.stream else "mock"]
        _, direct = post(mock_port, "/v1/chat/completions", upstream_body)
        if got != direct:
            raise SystemExit(f"{target.name}: the floor did not return the upstream's bytes")
    elif target.kind in ("product", "baseline", "stored"):
        expected = payloads.ANSWER
        if target.body.startswith("adapter"):
            expected = expected.replace("Here is a short answer.", "Here is a short, reviewed answer.")
        answer = streamed_text(got) if target.stream else json.loads(got)["choices"][0]["message"]["content"]
        if answer != expected:
            raise SystemExit(f"{target.name}: unexpected answer {answer!r}")
        if target.stream and not got.rstrip().endswith(b"data: [DONE]"):
            raise SystemExit(f"{target.name}: the stream did not end with [DONE]")


# -- load ---------------------------------------------------------------------------------------


class Load:
    """Runs one batch of N requests at concurrency C against a port, in a separate process."""

    def __init__(self, files: dict[str, Path], cpus: list[int] | None, use_wrk: bool) -> None:
        self.files = files
        self.cpus = cpus
        self.use_wrk = use_wrk

    def batch(self, port: int, body: str, requests: int, concurrency: int, *, ttfb: bool = False) -> dict[str, float]:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        if self.use_wrk and not ttfb:
            env = {**os.environ, "BENCH_BODY_FILE": str(self.files[body]), "BENCH_REQUESTS": str(requests)}
            command = [
                *pin(self.cpus), "wrk", "-t1", f"-c{concurrency}", "-d300s", "--timeout", "30s",
                "-s", str(HERE / "wrk_batch.lua"), url,
            ]  # fmt: skip
        else:
            env = {**os.environ, "PYTHONPATH": python_path()}
            command = [
                *pin(self.cpus), sys.executable, "-m", "benchmarks.loadgen", "--url", url,
                "--body-file", str(self.files[body]), "--requests", str(requests), "--concurrency", str(concurrency),
            ]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, timeout=600, check=False)
        out = done.stdout.decode()
        for line in out.splitlines():
            line = line.removeprefix("BENCH ")
            if line.startswith("{"):
                result: dict[str, float] = json.loads(line)
                if result["errors"]:
                    raise SystemExit(f"{url}: {result['errors']} failed requests in a batch")
                return result
        raise SystemExit(f"load generator failed ({command[0]}):\n{out}\n{done.stderr.decode()}")


def measure(target: Target, load: Load, sizes: Sizes) -> dict[str, float]:
    server = target.server
    cpu0, precise0, own0 = cpu_seconds(server.pid), cpu_seconds_precise(server.pid), own_cpu_seconds(server.pid)
    busy = load.batch(server.port, target.body, sizes.batch, 16)
    time.sleep(0.05)  # let it finish the requests wrk abandoned at the end of the batch
    cpu1, precise1, own1 = cpu_seconds(server.pid), cpu_seconds_precise(server.pid), own_cpu_seconds(server.pid)
    served = busy["requests"]
    row = {
        "cpu_us": (cpu1 - cpu0) / served * 1e6,  # its child processes' (a store's writer process) included
        "cpu_own_us": (own1 - own0) / served * 1e6,  # the server's process alone
        "cpu_us_schedstat": (precise1 - precise0) / served * 1e6,
        "rps": served / busy["seconds"],
        "p99_c16_us": busy["p99_us"],
    }
    idle = load.batch(server.port, target.body, sizes.latency, 1)
    row.update(p50_us=idle["p50_us"], p99_us=idle["p99_us"])
    server.served += int(served + idle["requests"])
    if target.stream:
        first = load.batch(server.port, target.body, sizes.ttfb, 1, ttfb=True)
        row.update(ttfb_us=first["ttfb_p50_us"])
        server.served += int(first["requests"])
    return row


# -- the run ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for name in ("adapter_critic", "httpx", "httpx-aiohttp", "aiohttp", "uvicorn", "starlette", "msgspec", "uvloop"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
    }


def product_config(mock_url: str) -> dict[str, Any]:
    api = {"model": payloads.API_MODEL, "base_url": mock_url}
    return {
        "timeout_seconds": 60,
        # The pipeline alone: `benchmarks/store.py` and `benchmarks/telemetry.py` measure what recording runs and
        # metrics cost, against this.
        "store": {"url": "none"},
        "telemetry": {"metrics": False},
        "served_models": {
            "bench-direct": {"mode": "direct", "api": api},
            "bench-adapter": {
                "mode": "adapter",
                "api": api,
                "adapter": {"model": payloads.ADAPTER_MODEL, "base_url": mock_url},
            },
            "bench-critic": {
                "mode": "critic",
                "api": api,
                "critic": {"model": payloads.CRITIC_MODEL, "base_url": mock_url},
            },
        },
    }


def source_of(tree: Path) -> str:
    """The import path of a source tree: its `src` (a worktree's root given), or the folder itself (its `src` given).
    Never the installed package: a path without `adapter_critic` in it is refused."""
    for folder in (tree / "src", tree):
        if (folder / "adapter_critic" / "__init__.py").is_file():
            return str(folder.resolve())
    raise SystemExit(f"--baseline {tree}: no adapter_critic package in it or in its src/")


@contextlib.contextmanager
def servers_running(
    workdir: Path, proxy_cpus: list[int] | None, other_cpus: list[int] | None, baseline: Path | None = None
) -> Iterator[dict[str, Server]]:
    with stopping() as started:
        mock = start_server(
            "mock", ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
            cpus=other_cpus, env={}, workdir=workdir,
        )  # fmt: skip
        started["mock"] = mock
        mock_url = f"http://127.0.0.1:{mock.port}/v1"
        config = workdir / "config.json"
        config.write_text(json.dumps(product_config(mock_url)))
        started["floor relay"] = start_server(
            "floor relay", ["-m", "uvicorn", "benchmarks.relay:app", "--lifespan", "off"],
            cpus=proxy_cpus, env={"FLOOR_UPSTREAM": mock_url}, workdir=workdir,
        )  # fmt: skip
        for transport in ("httpx", "aiohttp"):
            started[f"floor {transport}"] = start_server(
                f"floor {transport}", ["-m", "uvicorn", "benchmarks.floor:app", "--lifespan", "off"],
                cpus=proxy_cpus, env={"FLOOR_UPSTREAM": mock_url, "FLOOR_TRANSPORT": transport}, workdir=workdir,
            )  # fmt: skip
        product_env = {"ADAPTER_CRITIC_CONFIG": str(config)}
        started["product"] = start_server(
            "product", ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy_cpus, env=product_env, workdir=workdir
        )
        if baseline is not None:  # the product from another source tree (an earlier commit), measured alike
            # Its config holds only the served models and timeout: an earlier tree refuses keys it did not have yet.
            baseline_config = workdir / "baseline-config.json"
            plain = {key: value for key, value in product_config(mock_url).items() if key not in ("store", "telemetry")}
            baseline_config.write_text(json.dumps(plain))
            started["baseline"] = start_server(
                "baseline", ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy_cpus,
                env={"ADAPTER_CRITIC_CONFIG": str(baseline_config), "PYTHONPATH": source_of(baseline)}, workdir=workdir,
            )  # fmt: skip
        for name, capture in targets_module.STORED.items():  # the run store on (SQLite + metrics: the defaults)
            slug = name.replace(" ", "_")
            stored = workdir / f"{slug}.json"
            store = {"url": f"sqlite:///{workdir / slug}.sqlite3", "capture": capture}
            stored.write_text(json.dumps({**product_config(mock_url), "store": store, "telemetry": {"metrics": True}}))
            started[name] = start_server(
                name, ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy_cpus,
                env={"ADAPTER_CRITIC_CONFIG": str(stored), "ADAPTER_CRITIC_STORE": ""}, workdir=workdir,
            )  # fmt: skip
        started["product httpx"] = start_server(
            "product httpx", ["-m", "benchmarks.without_aiohttp", "adapter_critic.asgi:app"],
            cpus=proxy_cpus, env=product_env, workdir=workdir,
        )  # fmt: skip
        wait_all_ready(started.values())
        yield started


def build_targets(servers: dict[str, Server]) -> list[Target]:
    targets = []
    for stream in (False, True):
        suffix = "-stream" if stream else ""
        label = " stream" if stream else ""
        targets.append(Target(f"mock{label}", servers["mock"], f"mock{suffix}", stream, "mock", calls=0))
        targets.append(Target(f"floor relay{label}", servers["floor relay"], f"direct{suffix}", stream, "floor"))
        for transport in ("httpx", "aiohttp"):
            targets.append(
                Target(f"floor {transport}{label}", servers[f"floor {transport}"], f"direct{suffix}", stream, "floor")
            )
        for mode, calls in (("direct", 1), ("adapter", 2), ("critic", 3)):
            targets.append(Target(f"{mode}{label}", servers["product"], f"{mode}{suffix}", stream, "product", calls))
        for name, modes in targets_module.STORED_MODES.items():
            for mode, calls in modes:
                if stream and mode != "direct":
                    continue
                targets.append(
                    Target(f"{mode}{label} ({name})", servers[name], f"{mode}{suffix}", stream, "stored", calls)
                )
        targets.append(
            Target(f"direct{label} (httpx fallback)", servers["product httpx"], f"direct{suffix}", stream, "product")
        )
        if "baseline" in servers:
            for mode, calls in (("direct", 1), ("adapter", 2), ("critic", 3)):
                name = f"{mode}{label} (baseline)"
                targets.append(Target(name, servers["baseline"], f"{mode}{suffix}", stream, "baseline", calls))
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny run, to check the harness (< 1 minute)")
    parser.add_argument("--python-load", action="store_true", help="use benchmarks/loadgen.py even if wrk is installed")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--out", type=Path, help="JSON output file (default: benchmarks/results/<timestamp>.json)")
    parser.add_argument("--serve", action="store_true", help="only start the servers (pinned) and wait, to profile")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure the product from this source tree (e.g. a worktree of an earlier commit, or its `src`), "
        "in the same rounds, and print each mode's CPU as a ratio to it",
    )
    args = parser.parse_args()
    # On SIGTERM too, leave through `servers_running`'s `finally`, which stops the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.serve:
        serve_only()
        return
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = Sizes(**{**sizes.__dict__, "rounds": args.rounds})
    use_wrk = shutil.which("wrk") is not None and not args.python_load
    proxy_cpus, other_cpus = cpu_layout()
    info = machine()
    info.update(
        load_generator="wrk" if use_wrk else "benchmarks/loadgen.py",
        pinning={"proxy": proxy_cpus, "mock_and_load": other_cpus},
        sizes=f"{sizes.rounds} round(s) x {sizes.batch} req @16, {sizes.latency} @1",
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="adapter-critic-bench-") as tmp:
        workdir = Path(tmp)
        bodies = {
            "mock": payloads.request_bytes(payloads.API_MODEL),
            "mock-stream": payloads.request_bytes(payloads.API_MODEL, stream=True),
        }
        for mode in ("direct", "adapter", "critic"):
            bodies[mode] = payloads.request_bytes(f"bench-{mode}")
            bodies[f"{mode}-stream"] = payloads.request_bytes(f"bench-{mode}", stream=True)
        files = {}
        for key, body in bodies.items():
            files[key] = workdir / f"{key}.json"
            files[key].write_bytes(body)
        load = Load(files, other_cpus, use_wrk)
        baseline = (args.baseline / "src").resolve() if args.baseline else None
        with servers_running(workdir, proxy_cpus, other_cpus, baseline) as servers:
            targets = build_targets(servers)
            mock_port = servers["mock"].port
            product = servers["product"]
            for target in targets:
                check(target, bodies, mock_port)
            # Warm up every target; the product's RSS is read after `memory_early` direct requests.
            load.batch(product.port, "direct", sizes.memory_early, 16)
            product.served += sizes.memory_early
            memory = {"early_requests": product.served, "early_kib": rss_kib(product.pid)}
            for target in targets:
                load.batch(target.server.port, target.body, sizes.warmup, 16)
                target.server.served += sizes.warmup
            for number in range(sizes.rounds):
                print(f"round {number + 1}/{sizes.rounds} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
                for target in targets:
                    target.rounds.append(measure(target, load, sizes))
            if product.served < sizes.memory_late:
                top_up = sizes.memory_late - product.served
                load.batch(product.port, "direct", top_up, 16)
                product.served += top_up
            memory.update(late_requests=product.served, late_kib=rss_kib(product.pid))
    print(f"micro-benchmarks ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    micro_results = run_micro(args.quick, proxy_cpus)
    print(f"routing ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    from benchmarks import router  # (here: `benchmarks.path --tree` imports this module for an older tree too)

    router_results = run_micro(args.quick, proxy_cpus, "router")
    print(f"big answers ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    size_results = run_sizes(args.quick)
    print(f"paced streams ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    paced_results = run_module("paced", args.quick)
    summarise(targets)
    checks = (
        verdicts(targets, micro_results, memory)
        + router.checks(router_results)
        + paced.checks(paced_results)
        + big_answers.checks(size_results)
    )
    micro_text = (
        micro.format_table(micro_results)
        + "\n\n"
        + router.format_table(router_results)
        + "\n\nbig answers (benchmarks/sizes.py):\n"
        + big_answers.format_table(size_results)
        + "\n\n"
        + paced.format_table(paced_results)
    )
    info["seconds"] = round(time.monotonic() - started, 1)
    table = format_table(info, targets, checks, micro_text) + against_baseline(targets)
    print(table)
    result = {
        "machine": info,
        "targets": {t.name: {"summary": t.summary, "rounds": t.rounds, "calls": t.calls} for t in targets},
        "memory": memory,
        "micro": micro_results,
        "router": router_results,
        "sizes": size_results,
        "paced": paced_results,
        "checks": checks,
        "table": table,
    }
    out = (
        args.out
        or RESULTS / f"{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}{'-quick' if args.quick else ''}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {out}")


def serve_only() -> None:
    """Start the mock, the floors and the product as a run does, print where they are, wait for Ctrl-C."""
    proxy_cpus, other_cpus = cpu_layout()
    with tempfile.TemporaryDirectory(prefix="adapter-critic-bench-") as tmp:
        workdir = Path(tmp)
        for stream in (False, True):
            name = "direct-stream.json" if stream else "direct.json"
            (workdir / name).write_bytes(payloads.request_bytes("bench-direct", stream=stream))
        with servers_running(workdir, proxy_cpus, other_cpus) as servers:
            for server in servers.values():
                print(f"{server.name:<14} pid {server.pid:<7} http://127.0.0.1:{server.port}/v1/chat/completions")
            print(f"request bodies: {workdir}/direct.json, {workdir}/direct-stream.json (Ctrl-C to stop)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)


def run_sizes(quick: bool) -> dict[str, Any]:
    """`benchmarks/sizes.py` in its own process (it starts its own servers, pinned as these are)."""
    return run_module("sizes", quick)


def run_module(name: str, quick: bool) -> dict[str, Any]:
    """`benchmarks/<name>.py --json` in its own process (it starts its own servers, pinned as these are)."""
    env = {**os.environ, "PYTHONPATH": python_path()}
    command = [sys.executable, "-m", f"benchmarks.{name}", "--json", *(["--quick"] if quick else [])]
    done = subprocess.run(command, env=env, capture_output=True, timeout=1200, check=True, cwd=ROOT)
    results: dict[str, Any] = json.loads(done.stdout)
    return results


def run_micro(quick: bool, cpus: list[int] | None, name: str = "micro") -> dict[str, Any]:
    """An in-process benchmark (`benchmarks/<name>.py --json`) in its own process, pinned where the proxies are."""
    env = {**os.environ, "PYTHONPATH": python_path()}
    command = [*pin(cpus), sys.executable, "-m", f"benchmarks.{name}", "--json", *(["--quick"] if quick else [])]
    done = subprocess.run(command, env=env, capture_output=True, timeout=600, check=True, cwd=ROOT)
    results: dict[str, Any] = json.loads(done.stdout)
    return results


if __name__ == "__main__":
    main()
