"""What recording runs costs: the product's CPU per request with the run store off and on, side by side in one run.

    python -m benchmarks.store            # 5 rounds x 3000 requests per figure, a couple of minutes
    python -m benchmarks.store --quick    # 1 round x 300 requests, to check the harness
    python -m benchmarks.store --parts    # and where the store's cost goes: the store cut short at each part
    python -m benchmarks.store --against ../before   # and the store of another tree (a `git worktree`), same run

The same mock upstream and the same product (`uvicorn adapter_critic.asgi:app`, one worker, pinned to one core as
in `benchmarks/run.py`) run in five variants, each its own process: `store off` (`store.url = "none"`), `sqlite`
(every run recorded to a SQLite file, capture `full`), `sqlite, metadata` (capture `metadata`), `sqlite + metrics`
(the standalone server's defaults: the store as `sqlite` and the Prometheus metrics on) and `sqlite, metadata +
metrics`; the others have metrics off. Every store variant writes through its writer process (`store.writer`, the
default); `sqlite, inline` writes on the server's event loop and a thread of its (`store.writer = "inline"`). The
last two of `VARIANTS` are checked against their bound: the server's own process at most 1.10 times off's (all its
processes' CPU, the writer's included, printed beside).
Each round measures every variant beside `store off`, the two sharing the core at once
(direct mode, plain and streamed, a fixed batch at concurrency 16; `--apart` for one at a time, see
`benchmarks/variants.py`); the figure is the median over rounds of utime+stime per request — the background
writer's work included, in its thread or its child process — and each variant's ratio to `store off`; and the same
for the server's process alone (`own`).

`--parts` adds variants of `sqlite` cut short (`benchmarks/store_parts.py`): `recorder only` (records made,
dropped at the queue), `sent, not written` (records encoded as they are queued, each batch's frame made, not sent
to the writer process); and, of the inline writer, `queued, not written` (queued and taken in batches, then
dropped) and `rows, not written` (rows made, secrets masked, not written): each one's excess over the one before is
what that part costs a server under load, which is several times what the same work costs timed alone
(`benchmarks/recording.py`).

`--against TREE` adds `sqlite` and `sqlite + metrics` served from another source tree (`PYTHONPATH=<TREE>/src`, e.g.
a `git worktree` of an older commit), each beside this checkout's `store off` like the others: a change to the
store compared in one run, where the machine's drift from one run to the next would hide it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import run, variants  # noqa: E402

VARIANTS = (
    "store off", "sqlite", "sqlite, inline", "sqlite, metadata", "sqlite + metrics", "sqlite, metadata + metrics",
)  # fmt: skip
# `--parts`: `sqlite` cut short (`store_parts.PARTS`), in the order a run's records go through the store.
PARTS = {
    "recorder only": "recorder",
    "sent, not written": "sent",
    "queued, not written (inline)": "queued",
    "rows, not written (inline)": "rows",
}
# `--against`: these two, served from another tree.
AGAINST = {"sqlite (against)": "sqlite", "sqlite + metrics (against)": "sqlite + metrics"}
# The bounds of recording (with metrics, the standalone defaults) against both off, direct mode, by capture: the
# server's own process (its writer process's CPU is printed beside).
TARGETS = {"sqlite + metrics": 1.10, "sqlite, metadata + metrics": 1.10}


def servers_for(names: Sequence[str], against: Path | None = None) -> variants.Servers:
    """The servers of the variants `names` (of `VARIANTS`, `PARTS` and `AGAINST`, the last from the tree `against`)."""

    def products(workdir: Path, upstream: str) -> dict[str, variants.Product]:
        base = run.product_config(upstream)
        found: dict[str, variants.Product] = {}
        for name in names:
            database = workdir / f"{variants.slug(name)}.sqlite3"
            store = {"url": "none" if name == "store off" else f"sqlite:///{database}"}
            if name.startswith("sqlite, metadata"):
                store["capture"] = "metadata"
            if "inline" in name:
                store["writer"] = "inline"
            telemetry = {"metrics": AGAINST.get(name, name).endswith("metrics")}  # standalone defaults: both on
            env = variants.config_env(workdir, name, {**base, "store": store, "telemetry": telemetry})
            module = ["-m", "uvicorn"]
            if name in PARTS:
                module, env["STORE_PART"] = ["-m", "benchmarks.store_parts"], PARTS[name]
            if name in AGAINST and against is not None:
                env["PYTHONPATH"] = str(against.resolve() / "src")
            found[name] = (module, env)
        return found

    return variants.servers(products)


def main() -> None:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--parts", action="store_true", help="also the store cut short at each of its parts")
        parser.add_argument("--against", type=Path, help="also the store of this source tree (e.g. a git worktree)")

    args = variants.options(__doc__ or "", extra=extra)
    names = (*VARIANTS, *(PARTS if args.parts else ()), *(AGAINST if args.against else ()))
    servers = servers_for(names, args.against)
    measured = variants.measure(args, names, servers, prefix="adapter-critic-store-", settle_seconds=0.2)
    print(table(measured, names))


def table(measured: variants.Measured, names: Sequence[str] = VARIANTS) -> str:
    """The medians of CPU per request (and of it, the part off the event loop's thread), of the server's process
    alone, and of each batch's ratios to store off's measured beside it."""
    parts = (measured.figures, measured.ratios, measured.threads, measured.own, measured.own_ratios)
    median, x, threads, own, x_own = (measured.medians(part) for part in parts)
    lines = [
        f"run store overhead: product CPU µs per request (median of {measured.rounds} round(s) x {measured.batch} "
        f"requests @16, load: {measured.loader}); all: the server's processes (its writer process included), own: "
        f"the server's process alone; x off: the median ratio to store off measured "
        f"{'in its round' if measured.apart else 'beside it'}; "
        "off loop: of all, the part off the event loop's thread (the store's writer thread or process)",
        "",
        f"{'':<30}{'direct':>34}{'stream':>34}",
        f"{'variant':<30}" + f"{'all':>7}{'x off':>7}{'own':>6}{'x off':>7}{'off loop':>9}" * 2,
    ]
    for name in names:
        row = f"{name:<30}"
        for body in variants.BODIES:
            key = (name, body)
            row += f"{median[key]:>7.0f}{x[key]:>7.2f}{own[key]:>6.0f}{x_own[key]:>7.2f}{threads[key]:>9.0f}"
        lines.append(row)
    lines.append("")
    for name, target in TARGETS.items():
        ratio, alone = x[(name, "direct")], x_own[(name, "direct")]
        spread = measured.quartiles((name, "direct"), measured.own_ratios)
        lines.append(
            f"  {'ok  ' if alone <= target else 'MISS'} {name} on: direct CPU/request of the server's process vs "
            f"both off: {alone:.2f} (target ≤ {target}; quartiles {spread}); "
            f"all processes {ratio:.2f} (quartiles {measured.quartiles((name, 'direct'))})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
