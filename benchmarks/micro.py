"""Micro-benchmarks of the pure parts, in one process (`python -m benchmarks.micro [--quick]`).

- request decode + forward-body encode: the product's path (`decode_request`, the direct workflow's
  forward body, msgspec encode) against stdlib `json` round-tripping the same dict (`loads`, swap `model`,
  `dumps`), and plain msgspec doing the same; on a small, a 1.5 KB and a 200 KB request with tools;
- resolving the plan of a direct request (`resolve`), apart;
- SEARCH/REPLACE application (`adapter_critic.workflows.edits.review`) of 8 edit blocks on a 50 KB draft.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from adapter_critic import Config
from adapter_critic.pipeline.resolve import resolve
from adapter_critic.pipeline.stages import stage_body
from adapter_critic.protocols.openai.chunks import chunk_decoder
from adapter_critic.request.decode import decode_request
from adapter_critic.workflows.edits import review

from . import payloads

SIZES = ("small", "1.5k", "200k")
_CONFIG = Config.from_dict(
    {"served_models": {"bench-direct": {"mode": "direct", "api": {"model": "bench-api", "base_url": "http://x/v1"}}}}
)
_PLAN = resolve(_CONFIG, "bench-direct", None)
_encoder = msgspec.json.Encoder()


def product_forward(body: bytes) -> bytes:
    """What the product does with a direct request's body around the upstream call: validate and decode it
    (`decode_request`), build the forward body (`stage_body`), encode that. Resolving the plan and setting up
    the run are not decoding and are timed apart (`resolve_us`)."""
    request = decode_request(body)
    return _encoder.encode(stage_body(_PLAN.api, request.messages_json, request.options))


def stdlib_forward(body: bytes) -> bytes:
    data = json.loads(body)
    data["model"] = "bench-api"
    return json.dumps(data).encode()


def msgspec_forward(body: bytes) -> bytes:
    data = msgspec.json.decode(body)
    data["model"] = "bench-api"
    return msgspec.json.encode(data)


def review_draft(draft: str, reply: str) -> str:
    return review(draft, reply)


def time_per_call(fn: Callable[[], object], *, budget: float, repeats: int) -> float:
    """Median seconds per call over `repeats` runs of about `budget / repeats` seconds each."""
    fn()
    number = 1
    while True:
        started = time.perf_counter()
        for _ in range(number):
            fn()
        took = time.perf_counter() - started
        if took >= 0.01:
            break
        number *= 4
    number = max(1, int(number * (budget / repeats) / took))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - started) / number)
    return statistics.median(samples)


def run_all(quick: bool = False) -> dict[str, Any]:
    budget, repeats = (0.15, 3) if quick else (1.0, 7)
    results: dict[str, Any] = {"decode_encode": {}, "review_50k": {}, "resolve_us": 0.0}
    for size in SIZES:
        body = payloads.request_bytes("bench-direct", size)
        row: dict[str, float] = {"bytes": len(body)}
        functions: dict[str, Callable[[bytes], bytes]] = {
            "product": product_forward,
            "stdlib_json": stdlib_forward,
            "msgspec": msgspec_forward,
        }
        for name, fn in functions.items():
            row[f"{name}_us"] = time_per_call(functools.partial(fn, body), budget=budget, repeats=repeats) * 1e6
        row["stdlib_over_product"] = row["stdlib_json_us"] / row["product_us"]
        results["decode_encode"][size] = row
    request = decode_request(payloads.request_bytes("bench-direct"))
    results["resolve_us"] = (
        time_per_call(lambda: resolve(_CONFIG, request.model, None), budget=budget, repeats=repeats) * 1e6
    )
    draft, reply, _ = payloads.draft_and_review()
    results["review_50k"] = {
        "draft_chars": len(draft),
        "edit_blocks": reply.count("SEARCH\n"),
        "us": time_per_call(lambda: review_draft(draft, reply), budget=budget, repeats=repeats) * 1e6,
    }
    chunk = payloads.paced_events(1)[1].removeprefix(b"data: ").strip()  # a paced stream's one-token chunk
    results["chunk_decode_us"] = (
        time_per_call(lambda: chunk_decoder.decode(chunk), budget=budget, repeats=repeats) * 1e6
    )
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = [
        f"{'request decode + forward encode':<34}{'bytes':>8}{'product µs':>12}{'stdlib µs':>11}"
        f"{'msgspec µs':>12}{'stdlib/product':>16}"
    ]
    for size, row in results["decode_encode"].items():
        lines.append(
            f"{size:<34}{row['bytes']:>8}{row['product_us']:>12.1f}{row['stdlib_json_us']:>11.1f}"
            f"{row['msgspec_us']:>12.1f}{row['stdlib_over_product']:>15.1f}x"
        )
    r = results["review_50k"]
    lines.append(
        f"SEARCH/REPLACE, {r['edit_blocks']} blocks on a {r['draft_chars'] // 1000} KB draft: {r['us']:.0f} µs"
    )
    lines.append(f"resolving a request's plan (not part of the above): {results['resolve_us']:.1f} µs")
    lines.append(
        f"decoding a streamed one-token chunk (what the relay reads of it): {results['chunk_decode_us']:.2f} µs"
    )
    return "\n".join(lines)


def cli(description: str | None, run_all: Callable[[bool], dict[str, Any]], table: Callable[..., str]) -> None:
    """The command line of an in-process benchmark: `--quick`, and `--json` for the results instead of a table."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = run_all(args.quick)
    print(json.dumps(results) if args.json else table(results), flush=True)


def main() -> None:
    cli(__doc__, run_all, format_table)


if __name__ == "__main__":
    main()
