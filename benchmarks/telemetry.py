"""What metrics and tracing cost: the product's CPU per request with them off and on, side by side in one run.

    python -m benchmarks.telemetry            # 5 rounds x 3000 requests per figure, a couple of minutes
    python -m benchmarks.telemetry --quick    # 1 round x 300 requests, to check the harness

The same mock upstream and the same product (`uvicorn adapter_critic.asgi:app`, one worker, pinned to one core as
in `benchmarks/run.py`, run store off unless said) run in five variants, each its own process:
- `off`: `[telemetry] metrics = false` (and no tracing);
- `metrics`: the standalone default, `GET /metrics` on;
- `metrics, multiprocess`: the same with `PROMETHEUS_MULTIPROC_DIR` set (as under `--workers N`: every value
  lives in a memory-mapped file);
- `metrics + tracing`: and `tracing = true`, with an OpenTelemetry SDK recording every span
  (`benchmarks/with_otel_sdk.py`; exported to nowhere);
- `metrics + store`: metrics and the run store as the standalone server has them by default (SQLite, capture
  `full`): bounded at 1.20x of `off` (at capture `metadata`, 1.10x) (`benchmarks/store.py` has the store alone).
Each round measures every variant beside `off`, the two sharing the core at once (direct mode, plain and
streamed, a fixed batch at concurrency 16; `--apart` for one at a time, see `benchmarks/variants.py`); the
figure is the median over rounds of utime+stime per request, and each variant's ratio to `off`. On a busy
machine these differ by more than what telemetry costs, so the subscribers' own work for one direct run (its five
events, and under multiprocess mode the in-flight gauge) is also timed in-process, where nothing else interferes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from adapter_critic.core import Usage  # noqa: E402
from adapter_critic.events import (  # noqa: E402
    Attempt,
    Event,
    Noted,
    RunFinished,
    RunRecord,
    RunStarted,
    StageFinished,
    StageStarted,
)
from benchmarks import run, variants  # noqa: E402

VARIANTS = ("off", "metrics", "metrics, multiprocess", "metrics + tracing", "metrics + store")
# Direct-mode CPU per request within these ratios of off: metrics alone, and with the run store (capture `full`, as
# `benchmarks/store.py` bounds it).
TARGETS = {"metrics": 1.15, "metrics + store": 1.20}


def products(workdir: Path, upstream: str) -> dict[str, variants.Product]:
    base = run.product_config(upstream)
    telemetry = {
        "off": {"metrics": False},
        "metrics": {},
        "metrics, multiprocess": {},
        "metrics + tracing": {"tracing": True},
        "metrics + store": {},
    }
    found: dict[str, variants.Product] = {}
    for name in VARIANTS:
        variant = {**base, "telemetry": telemetry[name]}
        if name == "metrics + store":  # the standalone default: every run recorded to SQLite, capture full
            variant["store"] = {"url": f"sqlite:///{workdir / 'runs.sqlite3'}"}
        env = variants.config_env(workdir, name, variant)
        module = ["-m", "uvicorn"]
        if name == "metrics, multiprocess":
            shared = workdir / "multiproc"
            shared.mkdir()
            env["PROMETHEUS_MULTIPROC_DIR"] = str(shared)
        elif name == "metrics + tracing":
            module = ["-m", "benchmarks.with_otel_sdk"]
        found[name] = (module, env)
    return found


servers = variants.servers(products)


def subscriber_us(quick: bool) -> dict[str, float]:
    """µs per direct run of each variant's subscribers, timed in-process (best of 5 repeats)."""
    import timeit

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from adapter_critic.observe.metrics import Metrics
    from adapter_critic.observe.tracing import Tracing
    from benchmarks.with_otel_sdk import Discard

    target = "bench-api@http://127.0.0.1:9/v1"
    record = RunRecord("chatcmpl-bench", "bench-direct", "direct")
    events: list[Event] = [
        RunStarted("chatcmpl-bench", "bench-direct", "direct", False),
        StageStarted("api", target),
        StageFinished("api", target, (Attempt(target),), Usage(20, 30, 50), 1.5, "answer", None, True, "stop"),
        Noted("api", "answer"),
        RunFinished("ok", record),
    ]
    metrics = Metrics()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracing = Tracing(provider)

    def with_metrics() -> None:
        if metrics.multiprocess:  # one process reads the requests in flight at a scrape: nothing per request
            metrics.in_flight.inc()
        for event in events:
            metrics.on_event(event)
        if metrics.multiprocess:
            metrics.in_flight.dec()

    def with_tracing() -> None:
        for event in events:
            tracing.on_event(event)

    number = 2000 if quick else 20000
    results = {}
    for name, work in (("metrics", with_metrics), ("tracing (SDK)", with_tracing)):
        best = min(timeit.repeat(work, number=number, repeat=5))
        results[name] = best / number * 1e6
    return results


def main() -> None:
    args = variants.options(__doc__ or "")
    measured = variants.measure(args, VARIANTS, servers, prefix="adapter-critic-telemetry-", settle_seconds=0.05)
    print(table(measured, subscriber_us(args.quick)))


def table(measured: variants.Measured, micro: dict[str, float]) -> str:
    """The medians of CPU per request, and of each batch's ratio to off's measured beside it."""
    median, x = measured.medians(measured.figures), measured.medians(measured.ratios)
    lines = [
        f"telemetry overhead: product CPU µs per request (median of {measured.rounds} round(s) x {measured.batch} "
        f"requests @16, load: {measured.loader}); x off: the median ratio to off measured "
        f"{'in its round' if measured.apart else 'beside it'}",
        "",
        f"{'variant':<24}{'direct':>8}{'x off':>7}{'stream':>9}{'x off':>7}",
    ]
    for name in VARIANTS:
        plain, stream = median[(name, "direct")], median[(name, "direct-stream")]
        lines.append(
            f"{name:<24}{plain:>8.0f}{x[(name, 'direct')]:>7.2f}{stream:>9.0f}{x[(name, 'direct-stream')]:>7.2f}"
        )
    off = median[("off", "direct")]
    lines += ["", "the subscribers' own work for one direct run, timed in-process:"]
    for name, us in micro.items():
        lines.append(f"  {name:<22}{us:>8.1f} µs  ({us / off * 100:.1f} % of off's CPU per direct request)")
    lines.append("")
    for name, target in TARGETS.items():
        ratio = x[(name, "direct")]
        mark = "ok  " if ratio <= target else "MISS"
        lines.append(
            f"  {mark} {name}: direct CPU/request vs off: {ratio:.2f} (target ≤ {target}); "
            f"quartiles {measured.quartiles((name, 'direct'))}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
