"""A/B of two source trees: the product's CPU per direct request, plain and streamed, in alternating batches.

    python -m benchmarks.ab BASELINE_TREE [--product TREE] [--rounds 6] [--requests 2000] [--modes direct,adapter]
        [--same-config] [--recording] [--named-keys]

Both are `uvicorn adapter_critic.asgi:app` from their tree (`PYTHONPATH=<tree>/src`; this checkout's when no
`--product` is given), pinned to the same core, against the same mock upstream. This checkout runs with
`benchmarks/run.py`'s config (the run store and metrics off); another tree gets only what every tree knows (the
served models and the timeout) and its own defaults (`--same-config`: a recent tree gets this config too). Each
round loads every figure once per tree, in alternating order, so drift hits both alike; the table gives the medians
and every batch's figure. For a tree from before the plug-in registry, the installed entry points name this
checkout's workflows: they are loaded from the tree given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import payloads, procs, run  # noqa: E402

MODES = ("direct", "adapter", "critic")  # the served models of `run.product_config`, `bench-<mode>`
NAMED_KEY = "sk-bench-named-key-0123456789"  # `--named-keys`: the key every request is sent with


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path, help="the other source tree (e.g. a `git worktree` of an older commit)")
    parser.add_argument("--product", type=Path, help="the tree measured against it (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=2000, help="requests per batch, at concurrency 16")
    parser.add_argument(
        "--same-config", action="store_true", help="give the other tree this checkout's config too (a recent tree)"
    )
    parser.add_argument(
        "--recording",
        action="store_true",
        help="both with the standalone server's defaults: runs recorded to a SQLite file each, metrics on",
    )
    parser.add_argument(
        "--named-keys",
        action="store_true",
        help="both trees with named inbound keys (`[[auth.keys]]`, one bounded to `bench-*`), requests sent with one",
    )
    parser.add_argument("--modes", default="direct", help=f"comma-separated, of {', '.join(MODES)} (default: direct)")
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes: each of {', '.join(MODES)}")
    bodies = [f"{mode}{suffix}" for mode in modes for suffix in ("", "-stream")]
    proxy, other = procs.cpu_layout()
    with tempfile.TemporaryDirectory(prefix="adapter-critic-ab-") as tmp:
        workdir = Path(tmp)
        with procs.stopping() as started:
            started["mock"] = procs.start_server(
                "mock", ["-m", "uvicorn", "benchmarks.mock_upstream:app", "--lifespan", "off"],
                cpus=other, env={}, workdir=workdir,
            )  # fmt: skip
            config = run.product_config(f"http://127.0.0.1:{started['mock'].port}/v1")
            if args.named_keys:  # the request's key checked, its models matched, its name on the run
                os.environ["BENCH_AUTHORIZATION"] = f"Bearer {NAMED_KEY}"
                keys = [{"name": "bench", "key_env": "BENCH_NAMED_KEY", "models": ["bench-*"]}]
                keys.append({"name": "other", "key_env": "BENCH_OTHER_KEY"})
                config["auth"] = {"keys": keys}
                args.same_config = True
            plain = {key: value for key, value in config.items() if key in ("served_models", "timeout_seconds")}
            (workdir / "config.json").write_text(json.dumps(plain))
            (workdir / "this.json").write_text(json.dumps(config))
            files = {}
            for body in bodies:
                files[body] = workdir / f"{body}.json"
                model = f"bench-{body.removesuffix('-stream')}"
                files[body].write_bytes(payloads.request_bytes(model, stream=body.endswith("stream")))
            for name, tree in (("product", args.product), ("baseline", args.baseline)):
                file = "this.json" if tree is None or args.same_config else "config.json"
                if args.recording:
                    recorded = {**config, "store": {"url": f"sqlite:///{workdir / name}.sqlite3"}, "telemetry": {}}
                    file = f"{name}-recording.json"
                    (workdir / file).write_text(json.dumps(recorded))
                env = {"ADAPTER_CRITIC_CONFIG": str(workdir / file)}
                if args.named_keys:
                    env.update(BENCH_NAMED_KEY=NAMED_KEY, BENCH_OTHER_KEY=f"{NAMED_KEY}-other")
                if tree is not None:
                    env["PYTHONPATH"] = str(tree.resolve() / "src")
                started[name] = procs.start_server(
                    name, ["-m", "uvicorn", "adapter_critic.asgi:app"], cpus=proxy, env=env, workdir=workdir
                )
            procs.wait_all_ready(started.values())
            load = run.Load(files, other, shutil.which("wrk") is not None)
            figures: dict[tuple[str, str], list[float]] = {(n, b): [] for n in ("product", "baseline") for b in bodies}
            for name in ("product", "baseline"):
                for body in bodies:
                    load.batch(started[name].port, body, 500, 16)  # warm-up
            for number in range(args.rounds):
                print(f"round {number + 1}/{args.rounds}", file=sys.stderr)
                order = ("product", "baseline") if number % 2 == 0 else ("baseline", "product")
                for body in bodies:
                    for name in order:
                        server = started[name]
                        before = procs.cpu_seconds(server.pid)
                        done = load.batch(server.port, body, args.requests, 16)
                        figures[(name, body)].append((procs.cpu_seconds(server.pid) - before) / done["requests"] * 1e6)
    print(f"CPU µs per request, median of {args.rounds} alternating batches of {args.requests} @16")
    for body in bodies:
        product, baseline = (statistics.median(figures[(name, body)]) for name in ("product", "baseline"))
        every = {name: sorted(round(x) for x in figures[(name, body)]) for name in ("product", "baseline")}
        print(
            f"{body:<14} product {product:6.0f}  baseline {baseline:6.0f}  ratio {product / baseline:.3f}"
            f"   product {every['product']}  baseline {every['baseline']}"
        )


if __name__ == "__main__":
    main()
