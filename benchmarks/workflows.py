"""CPU per request of every built-in workflow, in one process (`python -m benchmarks.workflows [--quick]`).

Each served model runs on an in-process upstream (`httpx.MockTransport`) that answers at once with a pre-encoded
completion — a critique, an edit, a verdict, a plan of questions — so the figures are the product's own work:
decode, plan, every stage call (bodies, retries bookkeeping, events, the concurrent calls of panel, best-of-n,
self-consistency, mixture-of-agents and chain-of-verification), the extension and the response. The table shows
CPU µs per request and per upstream call, plain and streamed, each the median of several rounds; per upstream call
is the figure to compare across modes (it shows what running calls at once costs over running them one after
another).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio
import httpx
from asgi_lifespan import LifespanManager

from adapter_critic import Config, create_app

URL = "http://bench.upstream/v1"
MODES = {
    "direct": {"mode": "direct"},
    "adapter": {"mode": "adapter"},
    "critic": {"mode": "critic"},
    "advisor": {"mode": "advisor"},
    "panel": {"mode": "panel"},  # the four default lenses and a coordinator: 7 calls
    "best_of_3": {"mode": "best_of_n", "n": 3},  # 3 candidates, 2 comparisons in both orders: 7 calls
    # 5 samples, their answers (the word "blue" of each) voted on: 5 calls.
    "self_consistency_5": {"mode": "self_consistency", "n": 5, "extract": "regex:(blue)"},
    # The feedback never says "no change": draft, then 3 rounds of feedback and refine: 7 calls.
    "self_refine": {"mode": "self_refine"},
    "re2": {"mode": "re2"},  # 1 call, the question read twice
    "moa_3": {"mode": "mixture_of_agents"},  # one layer of 3 proposers, the aggregator: 4 calls
    "cove_3": {"mode": "chain_of_verification"},  # baseline, plan of 3 questions, 3 answers, final: 6 calls
}
_BODY = {"role": "user", "content": "Explain in two sentences why the sky is blue."}


def _completion(content: str) -> bytes:
    usage = {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice], "usage": usage}
    ).encode()


_DRAFT = "Sunlight scatters off air molecules. Blue light scatters most, so the sky looks blue."
_ANSWERS = {
    "draft": _completion(_DRAFT),
    "adapter": _completion("<<<<<<< SEARCH\nscatters most\n=======\nscatters the most\n>>>>>>> REPLACE"),
    "review": _completion("- Mention Rayleigh scattering by name."),
    "verdict": _completion("Both are fine; the first is clearer.\nWinner: A"),
    "plan": _completion("1. What scatters sunlight?\n2. Which colour scatters most?\n3. Who explained it?"),
}


def _stream(content: str) -> bytes:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    words = content.split(" ")
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**head, "choices": [{"index": 0, "delta": {"content": w + " "}}]} for w in words]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


_STREAMED = _stream(_DRAFT)


def _answer(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        return httpx.Response(200, content=_STREAMED, headers={"content-type": "text/event-stream"})
    system = body["messages"][0].get("content") if body["messages"][0]["role"] == "system" else ""
    if "SEARCH" in system:
        kind = "adapter"
    elif "Winner:" in system:
        kind = "verdict"
    elif "verification questions" in system:
        kind = "plan"
    elif system:
        kind = "review"
    else:
        kind = "draft"
    return httpx.Response(200, content=_ANSWERS[kind], headers={"content-type": "application/json"})


def config() -> Config:
    api = {"model": "bench-api", "base_url": URL}
    served = {f"bench-{name}": {**settings, "api": api} for name, settings in MODES.items()}
    return Config.from_dict({"served_models": served, "default_api_key_env": "BENCH_NO_KEY"})


async def measure(requests: int, rounds: int) -> list[dict[str, Any]]:
    calls = 0

    def counted(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return _answer(request)

    rows = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(counted)) as upstream:
        app = create_app(config(), http_client=upstream)
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                for name in MODES:
                    for stream in (False, True):
                        body = {"model": f"bench-{name}", "messages": [_BODY], "stream": stream}
                        samples = []
                        for _ in range(rounds):
                            calls = 0
                            began = time.process_time()
                            for _ in range(requests):
                                response = await client.post("/chat/completions", json=body)
                                assert response.status_code == 200, response.text
                            samples.append((time.process_time() - began) / requests * 1e6)
                        per_request = statistics.median(samples)
                        upstream_calls = calls / requests
                        rows.append(
                            {
                                "mode": name + (" stream" if stream else ""),
                                "calls": upstream_calls,
                                "cpu_us": per_request,
                                "cpu_us_per_call": per_request / upstream_calls,
                            }
                        )
    return rows


TARGET = 0.9  # a workflow of k calls costs at most 0.9 x k x direct: running stages costs less than k requests


def format_table(rows: list[dict[str, Any]]) -> str:
    """The table, each row also as a share of `calls` x direct (plain against direct, streamed against direct
    streamed) with its verdict against `TARGET`; a one-call workflow has no verdict (it is a direct request)."""
    direct = {row["mode"].endswith(" stream"): row["cpu_us"] for row in rows if row["mode"].startswith("direct")}
    head = f"{'mode':<28}{'calls':>6}{'CPU µs/req':>12}{'µs/call':>10}{'÷ calls x direct':>18}  target"
    lines = [head]
    for row in rows:
        share = row["cpu_us"] / (row["calls"] * direct[row["mode"].endswith(" stream")])
        verdict = "-" if row["calls"] < 2 else f"{'ok' if share <= TARGET else 'MISS'} (≤ {TARGET})"
        lines.append(
            f"{row['mode']:<28}{row['calls']:>6.0f}{row['cpu_us']:>12.0f}{row['cpu_us_per_call']:>10.0f}"
            f"{share:>18.2f}  {verdict}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 requests x 3 rounds per figure (a harness check)")
    args = parser.parse_args()
    requests, rounds = (20, 3) if args.quick else (300, 5)
    rows = anyio.run(measure, requests, rounds)
    print("CPU per request of each workflow in process (in-process app and upstream; client and upstream included)")
    print(format_table(rows))


if __name__ == "__main__":
    main()
