"""Decoding cost of hostile requests: each must be refused by a limit or handled in time proportional to its size.

    python -m benchmarks.hostile_inputs            # every case, best of 3
    python -m benchmarks.hostile_inputs --repeat 1

The app runs in-process (`httpx.ASGITransport`) in front of an upstream that answers without parsing what it gets,
so the figures are the server's own cost: reading, decoding, validating, building the stage calls, rendering the
reviewer prompts, applying edits. Printed per case: the status answered, the body size, the wall time, and the time
per MB (for the cases that are handled rather than refused, that last column should stay flat as sizes grow).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/hostile_inputs.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from asgi_lifespan import LifespanManager

from adapter_critic import Config, create_app
from adapter_critic.workflows.edits import EditError, review

UPSTREAM = "http://upstream.bench/v1"
COMPLETION = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "lgtm"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


def config(**top: Any) -> Config:
    target = {"model": "m", "base_url": UPSTREAM}
    served = {
        "direct": {"mode": "direct", "api": target},
        "adapter": {"mode": "adapter", "api": target, "adapter": target},
        "critic": {"mode": "critic", "api": target, "critic": target},
    }
    return Config.from_dict({"served_models": served, **top})


def body(model: str, messages: str, extra: str = "") -> bytes:
    return f'{{"model": "{model}", "messages": {messages}{extra}}}'.encode()


def tiny_messages(n: int) -> str:
    return "[" + ",".join(['{"role":"user","content":"hi"}'] * n) + "]"


def one_message(content: str) -> str:
    return f'[{{"role": "user", "content": {content}}}]'


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def schema(depth: int, width: int) -> str:
    """A JSON schema `depth` objects deep with `width` properties at each level (a hostile `tools` parameter)."""
    inner = '{"type": "string"}'
    for level in range(depth):
        props = ", ".join(
            f'"p{level}_{i}": {inner if i == 0 else chr(123) + chr(34) + "type" + chr(34) + ": 1}"}'
            for i in range(width)
        )
        inner = f'{{"type": "object", "properties": {{{props}}}}}'
    return f', "tools": [{{"type": "function", "function": {{"name": "f", "parameters": {inner}}}}}]'


CASES: list[tuple[str, Callable[[], bytes], dict[str, Any]]] = [
    ("100k tiny messages (default max_messages=2048)", lambda: body("direct", tiny_messages(100_000)), {}),
    (
        "100k tiny messages, limit raised, direct",
        lambda: body("direct", tiny_messages(100_000)),
        {"max_messages": 10**6},
    ),
    (
        "100k tiny messages, limit raised, adapter",
        lambda: body("adapter", tiny_messages(100_000)),
        {"max_messages": 10**6},
    ),
    (
        "100k tiny messages, limit raised, critic",
        lambda: body("critic", tiny_messages(100_000)),
        {"max_messages": 10**6},
    ),
    ("10 MB string, direct", lambda: body("direct", one_message(json.dumps("x" * 10_000_000))), {}),
    ("10 MB string, adapter", lambda: body("adapter", one_message(json.dumps("x" * 10_000_000))), {}),
    ("10 MB string, critic", lambda: body("critic", one_message(json.dumps("x" * 10_000_000))), {}),
    ("10 MB of \\u escapes, critic", lambda: body("critic", one_message('"' + "\\u00e9" * 1_700_000 + '"')), {}),
    ("30 MB string, critic", lambda: body("critic", one_message(json.dumps("x" * 30_000_000))), {}),
    ("tools schema 200 deep x 50 wide, critic", lambda: body("critic", one_message('"hi"'), schema(200, 50)), {}),
    ("tools 900 deep, critic", lambda: body("critic", one_message('"hi"'), f', "tools": {nested(900)}'), {}),
    ("content parts 900 deep, critic", lambda: body("critic", one_message(f"[{nested(900)}]")), {}),
    ("tools 100k deep", lambda: body("direct", one_message('"hi"'), f', "tools": {nested(100_000)}'), {}),
    ("body 1M deep", lambda: nested(1_000_000).encode(), {}),
    ("34 MB body (over max_body_bytes)", lambda: body("direct", one_message(json.dumps("x" * 34_000_000))), {}),
    (
        "invalid UTF-8 at the end of 30 MB",
        lambda: body("direct", one_message('"' + "x" * 30_000_000 + '@"')).replace(b"@", b"\xff"),
        {},
    ),
]


async def upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=COMPLETION, headers={"content-type": "application/json"})


async def measure(payload: bytes, top: dict[str, Any], repeat: int) -> tuple[int, float]:
    best = float("inf")
    status = 0
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as network,
        LifespanManager(create_app(config(**top), http_client=network)) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://b", timeout=120) as client,
    ):
        for _ in range(repeat):
            started = time.perf_counter()
            response = await client.post("/chat/completions", content=payload)
            best = min(best, time.perf_counter() - started)
            status = response.status_code
    return status, best


def edit_cases() -> list[tuple[str, int, float, str]]:
    """The adapter's reply is applied to the draft: blocks x draft size is the cost (capped by MAX_EDIT_WORK)."""
    rows = []
    for label, lines, blocks in (
        ("100 edit blocks on a 20 kB draft", 1_500, 100),
        ("100 edit blocks on a 195 kB draft (at the work cap)", 11_500, 100),
        ("100 edit blocks on a 16 MB draft (over the cap)", 1_200_000, 100),
    ):
        draft = "\n".join(f"line {i} text  " for i in range(lines))
        reply = "".join(
            f"<<<<<<< SEARCH\nline {lines - blocks + i} text\n=======\nX\n>>>>>>> REPLACE\n" for i in range(blocks)
        )
        started = time.perf_counter()
        try:
            review(draft, reply)
            outcome = "applied"
        except EditError as exc:
            outcome = f"refused: {str(exc)[:40]}"
        rows.append((label, len(draft), time.perf_counter() - started, outcome))
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is printed")
    args = parser.parse_args()
    print(f"{'case':58} {'status':>6} {'MB':>8} {'ms':>9} {'ms/MB':>8}")
    worst = ("", 0.0)
    for label, make, top in CASES:
        payload = make()
        status, seconds = await measure(payload, top, args.repeat)
        megabytes = len(payload) / 1e6
        print(f"{label:58} {status:>6} {megabytes:>8.2f} {seconds * 1000:>9.1f} {seconds * 1000 / megabytes:>8.1f}")
        worst = max(worst, (label, seconds), key=lambda row: row[1])
    for label, size, seconds, outcome in edit_cases():
        print(f"{label:58} {'-':>6} {size / 1e6:>8.2f} {seconds * 1000:>9.1f} {seconds * 1e9 / size:>8.1f}  {outcome}")
        worst = max(worst, (label, seconds), key=lambda row: row[1])
    print(f"\nworst case: {worst[0]}: {worst[1] * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
