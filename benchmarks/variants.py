"""Variants of the product measured side by side: the harness `benchmarks.store` and `benchmarks.telemetry` share.

Each variant is its own server (the caller's `servers` starts them, the mock first, every variant pinned to the
same core); every round loads every variant with direct requests, plain and streamed, in a fixed batch at
concurrency 16, and the figure is the server's utime+stime per request — work on its own threads and background
tasks included, and its child processes' (a store's writer process); `own` is the server's process alone.

By default a round loads each variant together with the first one (the baseline), in pairs: the two share the
core, each with its own load generator, so the two batches run under the same conditions and the baseline is
measured beside every other variant. On a shared virtual machine the CPU time one request takes drifts by a
third from one batch to the next (what the host's other tenants do to the caches and the core's sibling), more
than the differences measured here: loaded one after another (`--apart`), the same code's ratios moved by
±0.15 between runs, while paired rounds agree within a few hundredths.

The two ways do not measure the same thing. Sharing the core adds to both servers of a pair a cost per request
that does not depend on the variant (refilling the caches the other one emptied), and that pulls their ratio
towards 1: paired ratios understate what a variant costs a server that has its core alone. Measured on the same
code the same hour, the store and metrics' ratio was about 1.2 paired and 1.3-1.4 apart. Read a paired ratio as
a comparison between variants and between commits, the apart ratio as the nearer to a lone server's, and each
with its quartiles (`Measured.quartiles`), printed under each table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks import payloads, procs, run

BODIES = ("direct", "direct-stream")
Figures = dict[tuple[str, str], list[float]]  # (variant, body): a figure per batch
Servers = Callable[
    [Path, list[int] | None, list[int] | None], contextlib.AbstractContextManager[dict[str, procs.Server]]
]
# A variant's server: the `python` arguments that start it (the app is appended) and its environment.
Product = tuple[list[str], dict[str, str]]


def slug(name: str) -> str:
    """A variant's name as a file name: `sqlite + metrics (against)` is `sqlite_metrics_against`."""
    return re.sub(r"\W+", "_", name).strip("_")


def config_env(workdir: Path, name: str, config: dict[str, Any]) -> dict[str, str]:
    """The variant's config, written to a file of its own; the environment that serves it (with the config's store,
    never `ADAPTER_CRITIC_STORE`'s)."""
    path = workdir / f"{slug(name)}.json"
    path.write_text(json.dumps(config))
    return {"ADAPTER_CRITIC_CONFIG": str(path), "ADAPTER_CRITIC_STORE": ""}


def servers(products: Callable[[Path, str], dict[str, Product]]) -> Servers:
    """The `Servers` of the variants `products(workdir, the mock's /v1 URL)` names (see `started`)."""

    def start(
        workdir: Path, proxy: list[int] | None, other: list[int] | None
    ) -> contextlib.AbstractContextManager[dict[str, procs.Server]]:
        return started(workdir, proxy, other, lambda upstream: products(workdir, upstream))

    return start


@contextlib.contextmanager
def started(
    workdir: Path, proxy: list[int] | None, other: list[int] | None, products: Callable[[str], dict[str, Product]]
) -> Iterator[dict[str, procs.Server]]:
    """The mock upstream (on the `other` cores), then each variant `products(its /v1 URL)` names, on the `proxy`
    cores: `uvicorn adapter_critic.asgi:app` as the product's arguments say; every one ready, stopped after."""
    with procs.stopping() as servers:
        servers["mock"] = mock = procs.start_server(
            "mock", ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
            cpus=other, env={}, workdir=workdir,
        )  # fmt: skip
        for name, (module, env) in products(f"http://127.0.0.1:{mock.port}/v1").items():
            servers[name] = procs.start_server(
                name, [*module, "adapter_critic.asgi:app"], cpus=proxy, env=env, workdir=workdir
            )
        procs.wait_all_ready(servers.values())
        yield servers


def options(description: str, *, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The harness's command-line options (`extra` adds a script's own)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if extra is not None:
        extra(parser)
    parser.add_argument("--quick", action="store_true", help="1 round x 300 requests: check the harness")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--batch", type=int, help="override the requests per batch")
    parser.add_argument(
        "--apart", action="store_true",
        help="load one variant at a time (default: every variant at once, sharing the core, see the module docstring)",
    )  # fmt: skip
    parser.add_argument("--python-load", action="store_true", help="use benchmarks/loadgen.py even if wrk is installed")
    return parser.parse_args()


def measure(
    args: argparse.Namespace,
    variants: Sequence[str],
    servers: Servers,
    *,
    prefix: str,
    settle_seconds: float,
    request: Callable[[str, bool], bytes] | None = None,
) -> Measured:
    """Every variant's CPU µs per request, per body and round (and of it, the part off the event loop's thread);
    its ratio to the baseline's (the first variant's) measured with it (in its pair, or in its round with
    `--apart`); and the rounds, batch size and load generator.

    `settle_seconds` after each batch lets the server finish what the batch left (its last records written, the
    requests the load generator abandoned): that work is the batch's cost. `request` makes the request bodies (served
    model, stream): `payloads.request_bytes` unless given."""
    rounds, batch, warmup = (1, 300, 50) if args.quick else (5, 3000, 300)
    rounds = args.rounds or rounds
    batch = args.batch or batch
    use_wrk = shutil.which("wrk") is not None and not args.python_load
    proxy, other = procs.cpu_layout()
    figures: Figures = {(v, b): [] for v in variants for b in BODIES}
    ratios: Figures = {(v, b): [] for v in variants for b in BODIES}
    threads: Figures = {(v, b): [] for v in variants for b in BODIES}
    own: Figures = {(v, b): [] for v in variants for b in BODIES}
    own_ratios: Figures = {(v, b): [] for v in variants for b in BODIES}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(tmp)
        files = {}
        for body in BODIES:
            files[body] = workdir / f"{body}.json"
            stream = body.endswith("stream")
            made = request("bench-direct", stream) if request else payloads.request_bytes("bench-direct", stream=stream)
            files[body].write_bytes(made)
        load = run.Load(files, other, use_wrk)
        with servers(workdir, proxy, other) as started:
            for name in variants:
                for body in BODIES:
                    load.batch(started[name].port, body, warmup, 16)
            for number in range(rounds):
                print(f"round {number + 1}/{rounds}", file=sys.stderr)
                for body in BODIES:
                    groups = [[name] for name in variants] if args.apart else _pairs(variants)
                    if number % 2:  # every other round in reverse: no variant always comes first, or last
                        groups.reverse()
                    measured: dict[str, tuple[float, float, float]] = {}
                    for group in groups:
                        servers_ = {name: started[name] for name in group}
                        found = _batch(load, servers_, body, batch, settle_seconds)
                        for name, (figure, off_loop, alone) in found.items():
                            measured[name] = (figure, off_loop, alone)
                            figures[(name, body)].append(figure)
                            threads[(name, body)].append(off_loop)
                            own[(name, body)].append(alone)
                            if not args.apart:
                                ratios[(name, body)].append(figure / found[variants[0]][0])
                                own_ratios[(name, body)].append(alone / found[variants[0]][2])
                    if args.apart:
                        for name, (figure, _, alone) in measured.items():
                            ratios[(name, body)].append(figure / measured[variants[0]][0])
                            own_ratios[(name, body)].append(alone / measured[variants[0]][2])
    loader = "wrk" if use_wrk else "benchmarks/loadgen.py"
    return Measured(figures, ratios, threads, rounds, batch, loader, args.apart, own, own_ratios)


@dataclasses.dataclass
class Measured:
    figures: Figures  # CPU µs per request
    ratios: Figures  # each batch's figure over the baseline's measured with it
    threads: Figures  # of `figures`, the CPU of the server's other threads than the event loop's
    rounds: int
    batch: int
    loader: str
    apart: bool = False  # loaded one at a time (`--apart`), not in pairs
    own: Figures = dataclasses.field(default_factory=dict)  # CPU µs per request of the server's process alone
    own_ratios: Figures = dataclasses.field(default_factory=dict)  # `own` over the baseline's

    def medians(self, part: Figures) -> dict[tuple[str, str], float]:
        """The median of each of `part`'s lists (`figures`, `ratios`, `threads`, `own` or `own_ratios`)."""
        return {key: statistics.median(values) for key, values in part.items()}

    def quartiles(self, key: tuple[str, str], part: Figures | None = None) -> str:
        """The spread of one variant's ratios (or of `part`: `own_ratios`) over its batches: `first quartile-third
        quartile (n batches)`."""
        values = (self.ratios if part is None else part)[key]
        if len(values) < 2:
            return f"{values[0]:.2f} (1 batch)" if values else "no batch"
        low, _, high = statistics.quantiles(values, n=4)
        return f"{low:.2f}-{high:.2f} ({len(values)} batches, {'apart' if self.apart else 'paired'})"


def _pairs(variants: Sequence[str]) -> list[list[str]]:
    """The first variant (the baseline) with each of the others in turn."""
    return [[variants[0], name] for name in variants[1:]] or [[variants[0]]]


def _batch(
    load: run.Load, servers: dict[str, procs.Server], body: str, requests: int, settle_seconds: float
) -> dict[str, tuple[float, float, float]]:
    """One batch of `requests` against each of `servers` at once; each server's CPU µs per request (its child
    processes' included), of it the part of its other threads and processes than the event loop's (the main
    thread's), and its own process's alone."""
    before = {
        name: (procs.cpu_seconds(server.pid), _main_thread_seconds(server.pid), procs.own_cpu_seconds(server.pid))
        for name, server in servers.items()
    }
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        batches = {name: pool.submit(load.batch, server.port, body, requests, 16) for name, server in servers.items()}
        done = {name: future.result() for name, future in batches.items()}
    time.sleep(settle_seconds)
    found = {}
    for name, server in servers.items():
        total = procs.cpu_seconds(server.pid) - before[name][0]
        main = _main_thread_seconds(server.pid) - before[name][1]
        alone = procs.own_cpu_seconds(server.pid) - before[name][2]
        served = done[name]["requests"]
        found[name] = (total / served * 1e6, max(0.0, total - main) / served * 1e6, alone / served * 1e6)
    return found


def _main_thread_seconds(pid: int) -> float:
    """utime + stime of the process's main thread (the event loop's), from /proc/<pid>/task/<pid>/stat."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / procs.TICK
