"""The figures of a `run.py` run, read out: each target's medians over the rounds, the latency it adds over the mock,
its ratios to the bare aiohttp relay of the same run, the verdicts against the targets, and the printed table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from benchmarks import targets as targets_module
from benchmarks.procs import Server


@dataclass
class Target:
    name: str
    server: Server
    body: str  # key into the body files
    stream: bool
    kind: str  # mock | floor | product
    calls: int = 1  # upstream calls per request
    rounds: list[dict[str, float]] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)


def summarise(targets: list[Target]) -> None:
    by_name = {t.name: t for t in targets}
    for t in targets:
        t.summary = {key: statistics.median(r[key] for r in t.rounds) for key in t.rounds[0]}
    for stream in (False, True):
        label = " stream" if stream else ""
        mock = by_name[f"mock{label}"].summary
        for t in targets:
            if t.stream != stream:
                continue
            t.summary["added_p50_us"] = t.summary["p50_us"] - mock["p50_us"]
            t.summary["added_p99_us"] = t.summary["p99_us"] - mock["p99_us"]
            if stream:
                t.summary["added_ttfb_us"] = t.summary["ttfb_us"] - mock["ttfb_us"]
        fastest = by_name[f"floor relay{label}"]  # the bare aiohttp relay: the floor every ratio is read against
        for t in targets:
            if t.stream != stream or t.kind == "mock":
                continue
            t.summary["floor"] = fastest.name  # type: ignore[assignment]
            t.summary["cpu_x"] = t.summary["cpu_us"] / fastest.summary["cpu_us"]
            t.summary["rps_x"] = t.summary["rps"] / fastest.summary["rps"]
            floor_added = fastest.summary["added_p50_us"]
            t.summary["added_p50_x"] = t.summary["added_p50_us"] / floor_added if floor_added > 0 else float("nan")


def verdicts(targets: list[Target], micro_results: dict[str, Any], memory: dict[str, int]) -> list[dict[str, Any]]:
    """Each figure with its target: a ratio to the bare aiohttp relay of the same run, or to the product's own direct
    mode."""
    s = {t.name: t.summary for t in targets}
    direct, direct_stream = s["direct"], s["direct stream"]
    floor_stream = s["floor relay stream"]
    rows: list[tuple[str, float, str, float]] = [
        ("direct: CPU/request vs the bare aiohttp relay", direct["cpu_x"], "≤", 1.5),
        ("direct stream: CPU/request vs the bare aiohttp relay", direct_stream["cpu_x"], "≤", 1.8),
        (
            "direct stream: added TTFB over the bare relay's (µs)",
            direct_stream["added_ttfb_us"] - floor_stream["added_ttfb_us"],
            "≤",
            200.0,
        ),
    ]
    products = [t for t in targets if t.kind == "product" and "fallback" not in t.name]
    for t in products:
        if t.calls > 1:
            per_call = (direct_stream if t.stream else direct)["cpu_us"] * t.calls
            rows.append((f"{t.name}: CPU/request vs {t.calls} x direct", t.summary["cpu_us"] / per_call, "≤", 0.9))
    for t in products:
        p50 = max(t.summary["added_p50_us"], 1.0)
        rows.append((f"{t.name}: added p99 vs added p50", t.summary["added_p99_us"] / p50, "≤", 2.0))
    rows += [
        (
            "decode+encode 1.5 KB: stdlib json time / product time",
            micro_results["decode_encode"]["1.5k"]["stdlib_over_product"],
            "≥",
            3.0,
        ),
        (
            f"RSS after {memory['late_requests']} requests vs after {memory['early_requests']}",
            memory["late_kib"] / memory["early_kib"],
            "≤",
            1.1,
        ),
    ]
    rows += targets_module.store_rows(s)
    out = []
    for name, value, op, limit in rows:
        ok = value <= limit if op == "≤" else value < limit if op == "<" else value >= limit
        out.append({"target": name, "value": value, "op": op, "limit": limit, "ok": ok})
    return out


def format_table(info: dict[str, Any], targets: list[Target], checks: list[dict[str, Any]], micro_text: str) -> str:
    lines = [
        f"adapter_critic benchmark, {info['date']}: {info['cpu']}, {info['usable_cores']} cores, "
        f"Python {info['python']}, load: {info['load_generator']}, {info['sizes']}",
        "CPU = proxy CPU time per request at concurrency 16; +p50/+p99 = latency added at concurrency 1 over calling",
        "the mock directly; +TTFB = added time to the first streamed byte; x floor = ratio to the fastest floor",
        "",
        f"{'target':<38}{'CPU µs':>7}{'x floor':>8}{'req/s':>7}{'x floor':>8}{'+p50 µs':>8}{'x floor':>8}"
        f"{'+p99 µs':>8}{'+TTFB µs':>9}",
    ]
    for t in targets:
        s = t.summary
        if t.kind == "mock":
            ttfb = f"{s['ttfb_us']:.0f}*" if t.stream else ""
            lines.append(
                f"{t.name + ' (direct)':<38}{s['cpu_us']:>7.0f}{'':>8}{s['rps']:>7.0f}{'':>8}"
                f"{s['p50_us']:>7.0f}*{'':>8}{s['p99_us']:>7.0f}*{ttfb:>9}"
            )
            continue
        ttfb = f"{s['added_ttfb_us']:.0f}" if t.stream else ""
        lines.append(
            f"{t.name:<38}{s['cpu_us']:>7.0f}{_ratio(s.get('cpu_x')):>8}{s['rps']:>7.0f}{_ratio(s.get('rps_x')):>8}"
            f"{s['added_p50_us']:>8.0f}{_ratio(s.get('added_p50_x')):>8}{s['added_p99_us']:>8.0f}{ttfb:>9}"
        )
    lines.append("* the mock's own latency / time to first byte, which the other rows add to")
    lines += ["", micro_text, "", "targets (every ratio to the bare aiohttp relay of the same run):"]
    lines += [verdict(c) for c in checks]
    return "\n".join(lines)


def verdict(check: dict[str, Any]) -> str:
    """A check's line: `ok` or `MISS`, what it measures, its value and its target."""
    mark = "ok  " if check["ok"] else "MISS"
    return f"  {mark} {check['target']}: {check['value']:.2f} (target {check['op']} {check['limit']:g})"


def against_baseline(targets: list[Target]) -> str:
    """Each mode's CPU per request as a ratio to the baseline's, when one was measured."""
    by_name = {t.name: t.summary for t in targets}
    lines = []
    for t in targets:
        base = by_name.get(f"{t.name} (baseline)")
        if t.kind == "product" and base is not None:
            lines.append(f"  {t.name:<20} CPU {t.summary['cpu_us']:>6.0f} µs vs {base['cpu_us']:>6.0f} µs: "
                         f"{t.summary['cpu_us'] / base['cpu_us']:.3f}x")  # fmt: skip
    return "\n\nagainst the baseline (same rounds):\n" + "\n".join(lines) if lines else ""


def _ratio(value: float | None) -> str:
    return "" if value is None or value != value else f"{value:.2f}"
