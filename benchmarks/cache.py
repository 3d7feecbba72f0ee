"""What the exact-match cache costs a request: the product's CPU per request with the cache off, on and missing,
and on and hitting, side by side in one run.

    python -m benchmarks.cache            # 5 rounds x 3000 requests per figure, a couple of minutes
    python -m benchmarks.cache --quick    # 1 round x 300 requests, to check the harness

Three variants of the product (`uvicorn adapter_critic.asgi:app`, one worker, pinned as in `benchmarks/run.py`), each
its own process recording to a SQLite file of its own (the cache keeps its answers in the run store), metrics off,
every request `temperature: 0` (deterministic: looked up when its model caches): `cache off` (`bench-direct`
without `cache`), `cache on, misses` (`cache = true` with a time to live of a microsecond: every request is looked up,
misses, runs and has its answer kept) and `cache on, hits` (`cache = true`: every request after the first is answered
from the cache). Each is loaded beside `cache off` (see `benchmarks/variants.py`); the figures are the medians of
CPU per request — the store's writer included — and of the ratio to `cache off`, direct mode, plain and streamed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import payloads, run, variants  # noqa: E402

VARIANTS = ("cache off", "cache on, misses", "cache on, hits")


def deterministic(model: str, stream: bool) -> bytes:
    """The benchmark's request at `temperature: 0`, which a served model with `cache = true` looks up."""
    return json.dumps({**payloads.request(model, "1.5k", stream=stream), "temperature": 0}).encode()


def servers_for(names: Sequence[str]) -> variants.Servers:
    def products(workdir: Path, upstream: str) -> dict[str, variants.Product]:
        base = run.product_config(upstream)
        found: dict[str, variants.Product] = {}
        for name in names:
            served = json.loads(json.dumps(base["served_models"]))
            if name != "cache off":
                served["bench-direct"]["cache"] = True
            if name == "cache on, misses":
                served["bench-direct"]["cache_ttl_seconds"] = 1e-6
            store = {"url": f"sqlite:///{workdir / f'{variants.slug(name)}.sqlite3'}"}
            env = variants.config_env(workdir, name, {**base, "served_models": served, "store": store})
            found[name] = (["-m", "uvicorn"], env)
        return found

    return variants.servers(products)


def main() -> None:
    args = variants.options(__doc__ or "")
    measured = variants.measure(
        args, VARIANTS, servers_for(VARIANTS), prefix="adapter-critic-cache-", settle_seconds=0.2, request=deterministic
    )
    median, x = measured.medians(measured.figures), measured.medians(measured.ratios)
    lines = [
        f"exact-match cache: product CPU µs per request (median of {measured.rounds} round(s) x {measured.batch} "
        f"requests @16, load: {measured.loader}); x off: the median ratio to cache off measured beside it",
        "",
        f"{'variant':<20}{'direct':>8}{'x off':>7}{'stream':>9}{'x off':>7}",
    ]
    for name in VARIANTS:
        row = f"{name:<20}"
        for body in variants.BODIES:
            row += f"{median[(name, body)]:>{8 if body == 'direct' else 9}.0f}{x[(name, body)]:>7.2f}"
        lines.append(row)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
