"""Where a cache miss's CPU goes, in one process (`python -m benchmarks.cache_parts [--quick]`).

The product (`create_app`, a SQLite run store in a temporary folder, metrics off) answers direct requests at
`temperature: 0` from an in-process upstream (`httpx.MockTransport`), through httpx's ASGI transport: no network, so
the figures are the product's own work. Three variants, in alternating rounds: `cache off`, `lookup only` (`cache =
true` with a time to live of a microsecond, so every request misses, and the answer not kept) and `miss` (the same,
the answer kept: made into an entry and written by the store's writer). For the misses it also times, on the event
loop's thread (`time.thread_time`), the three parts of the request path: whether the request is looked up
(`wanted`), its key, and the lookup (one read by primary key). `benchmarks/cache.py` measures the same in a server
under load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from asgi_lifespan import LifespanManager

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from adapter_critic import Config, create_app  # noqa: E402
from adapter_critic.cache import answers  # noqa: E402
from adapter_critic.http import chat  # noqa: E402
from benchmarks import payloads  # noqa: E402

VARIANTS = ("cache off", "lookup only", "miss")
PARTS = ("wanted", "key", "lookup")


def _answer(request: httpx.Request) -> httpx.Response:
    body = payloads.completion(payloads.API_MODEL, payloads.ANSWER)
    return httpx.Response(200, content=body, headers={"content-type": "application/json"})


def _config(folder: str, variant: str) -> Config:
    served: dict[str, Any] = {"mode": "direct", "api": {"model": payloads.API_MODEL, "base_url": "http://up/v1"}}
    if variant != "cache off":
        served |= {"cache": True, "cache_ttl_seconds": 1e-6}
    return Config.from_dict(
        {
            "served_models": {"bench-direct": served},
            "store": {"url": f"sqlite:///{folder}/runs.sqlite3"},
            "telemetry": {"metrics": False},
            "default_api_key_env": "BENCH_NO_KEY",
        }
    )


class Timed:
    """The CPU time (event loop's thread) of each of `PARTS`, summed, while `timing()` is on."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0)

    @contextmanager
    def timing(self, keep: bool) -> Iterator[None]:
        """Time `PARTS` (and, unless `keep`, keep no answer) in this process while the block runs."""
        spent = self.spent

        def timed(part: str, function: Callable[..., Any]) -> Callable[..., Any]:
            def sync(*args: Any) -> Any:
                began = time.thread_time_ns()
                try:
                    return function(*args)
                finally:
                    spent[part] += time.thread_time_ns() - began

            async def asynchronous(*args: Any) -> Any:
                began = time.thread_time_ns()
                try:
                    return await function(*args)
                finally:
                    spent[part] += time.thread_time_ns() - began

            return asynchronous if part == "lookup" else sync

        cache = answers.AnswerCache
        swaps: list[tuple[Any, str, Any]] = [
            (chat, "wanted", timed("wanted", chat.wanted)),  # type: ignore[attr-defined]
            (cache, "key", timed("key", cache.key)),
            (cache, "lookup", timed("lookup", cache.lookup)),
        ]
        if not keep:
            swaps.append((cache, "keeper", lambda *_: lambda event: None))
        originals = [(owner, name, getattr(owner, name)) for owner, name, _ in swaps]
        for owner, name, value in swaps:
            setattr(owner, name, value)
        try:
            yield
        finally:
            for owner, name, value in originals:
                setattr(owner, name, value)


async def _cpu_per_request(variant: str, requests: int, timed: Timed) -> float:
    body = {**payloads.request("bench-direct", "1.5k"), "temperature": 0}
    with tempfile.TemporaryDirectory() as folder, timed.timing(keep=variant == "miss"):
        async with httpx.AsyncClient(transport=httpx.MockTransport(_answer)) as upstream:
            app = create_app(_config(folder, variant), http_client=upstream)
            async with LifespanManager(app) as manager:
                transport = httpx.ASGITransport(app=manager.app)
                async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                    for _ in range(requests // 5):  # warm-up
                        await client.post("/chat/completions", json=body)
                    timed.spent.update(dict.fromkeys(PARTS, 0))
                    began = time.process_time()
                    for _ in range(requests):
                        response = await client.post("/chat/completions", json=body)
                        assert response.status_code == 200, response.text
                    return (time.process_time() - began) / requests * 1e6


async def measure(requests: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """CPU µs per request of each variant per round, and each part's µs per miss per round (`miss` variant)."""
    figures: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    timed = Timed()
    for _ in range(rounds):
        for variant in VARIANTS:
            figures[variant].append(await _cpu_per_request(variant, requests, timed))
            if variant == "miss":
                for part in PARTS:
                    parts[part].append(timed.spent[part] / requests / 1e3)
    return figures, parts


def table(figures: dict[str, list[float]], parts: dict[str, list[float]], rounds: int, requests: int) -> str:
    median: Callable[[list[float]], float] = statistics.median
    off = median(figures["cache off"])
    lines = [
        f"a cache miss in one process: CPU µs per direct request (median of {rounds} rounds x {requests})",
        "",
        f"{'variant':<14}{'µs/req':>8}{'x off':>7}",
    ]
    lines += [f"{name:<14}{median(values):>8.0f}{median(values) / off:>7.2f}" for name, values in figures.items()]
    lines += ["", "on the request path of a miss (event loop's thread, µs per request):"]
    lines += [f"  {part:<10}{median(values):>8.1f}" for part, values in parts.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 requests x 1 round (a harness check)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    requests, rounds = (200, 1) if args.quick else (2000, args.rounds)
    figures, parts = anyio.run(measure, requests, rounds)
    print(table(figures, parts, rounds, requests))


if __name__ == "__main__":
    main()
