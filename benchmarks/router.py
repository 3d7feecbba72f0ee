"""What choosing a candidate costs an `auto` model per request, in one process (`python -m benchmarks.router
[--quick] [--json]`); the target is 50 µs of CPU per request.

Every request is decoded once the way the server decodes it (`decode_request` of its bytes), then routed many times:
- `Router.decide` (the last user message's features, its class, the rules, the policy's choice, exploration) under
  these configs: `default` (three candidates, no rule, no policy), `5 rules` (by key, header, metadata, class and
  length, none of which holds, so every one is looked at; the request carries `metadata` so the metadata rule
  decodes it), `class regex` (an operator class with the pattern `(?i)\b(check|review|look)`, which matches none of
  the requests, so the message's first 4,000 characters are searched), `class regex, charset first` (the same
  matches written to start with a character class, `[CcLlRr](?<=\b[CcLlRr])(?i:heck|eview|ook)`), `policy 8x4` (a
  fitted `Policy` of 8 classes by 4 candidates, the request's own class among them);
- the service's step, `Routing.route` awaited in a loop (the decision, the plan replaced, `Decision.note`), on the
  `auto` model of a config with prefixed candidates: with the class regex above and no policy (`service`), and with
  no class and a fitted policy of 8 classes by 4 candidates (`service, policy`); no run store (`engine=None`),
  metrics off.
Requests: `short` (a 40-character question), `medium` (a 1.5 KB message), `long prose` and `long code` (20,000
characters, of prose, and of prose around Python in fences), `long, other language` (20,000 characters of French),
and `40 turns` (a short question after 40 user/assistant exchanges). The prose has a typographic apostrophe and dash,
as pasted text does: a message that is not plain ASCII has its letters counted for the language feature.

Each case runs 21 rounds (5 with `--quick`) of about 20 ms of calls each (10 with `--quick`), every round timing
every case once, so the host's drift hits all alike: the CPU time (`time.process_time`) of a round over its calls is
one per-round mean; the table has their median and their p99 (with few rounds, about their worst). Then a round of
single calls of each case, each timed with `time.perf_counter_ns` (wall time, the timer's own cost taken off): their
p50, and their p99, the per-call tail (the garbage collector's collections, the host's preemptions).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from adapter_critic.config import Config
from adapter_critic.config.routing import RequestClass, Route, Rule
from adapter_critic.core import ChatRequest
from adapter_critic.pipeline.resolve import resolve
from adapter_critic.request.decode import decode_request
from adapter_critic.routing.features import last_user_text
from adapter_critic.routing.policy import Arm, Policy
from adapter_critic.routing.router import Router
from adapter_critic.service.routing import Routing

from . import report
from .micro import cli

TARGET_US = 50.0
CANDIDATES = ["bench-direct", "bench-critic", "bench-best-of-n", "bench-self-consistency"]
PREFIXED = [
    "direct-adapter-critic-demo-model",
    "self_consistency-adapter-critic-demo-model",
    "critic-adapter-critic-demo-model",
    "best_of_n-adapter-critic-demo-model",
]
REVIEW = r"(?i)\b(check|review|look)"
REVIEW_CHARSET_FIRST = r"[CcLlRr](?<=\b[CcLlRr])(?i:heck|eview|ook)"  # the same matches, found faster
PATTERNED = ("class regex", "class regex, charset first", "service")  # the configs with an operator class's pattern
# The policy's classes: those the requests below fall in, and others.
POLICY_CLASSES = [
    "text-short", "text-medium", "text-long", "code-long", "numbers-short", "numbers-medium", "choices-short",
    "tools-medium",
]  # fmt: skip

# Prose as it is pasted into a chat: typographic apostrophes and dashes, so not ASCII (which a request in plain ASCII
# is spared: the language check).
_PROSE = (
    "The committee met on a grey morning to settle how the archive would be kept once the old building closed. "
    "Some wanted every letter scanned before the move; others said the boxes should travel as they were \u2014 "
    "they\u2019d be sorted at the new site, where there would be room and light enough to work. "
)
_FRENCH = (
    "Le comité s'est réuni par une matinée grise pour décider de la façon dont les archives seraient gardées "
    "après la fermeture de l'ancien bâtiment. Certains voulaient numériser chaque lettre avant le déménagement ; "
    "d'autres préféraient déplacer les cartons tels quels et les trier sur le nouveau site, où la lumière abonde. "
)
_CODE = '''```python
def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
```
'''


def _repeat(text: str, chars: int) -> str:
    return (text * (chars // len(text) + 1))[:chars]


def messages(size: str) -> list[dict[str, Any]]:
    """The messages of a request of `size` (module docstring)."""
    system = {"role": "system", "content": "You are a careful assistant who answers in plain words."}
    if size == "short":
        return [system, {"role": "user", "content": "What is the capital of France, and why?"}]
    if size == "medium":
        return [system, {"role": "user", "content": "Summarise this for a newsletter. " + _repeat(_PROSE, 1470)}]
    if size == "long prose":
        return [system, {"role": "user", "content": "Summarise this report. " + _repeat(_PROSE, 20_000)}]
    if size == "long code":
        part = _PROSE + "Here is the function as it stands:\n" + _CODE + "\n"
        return [system, {"role": "user", "content": "Why is this slow? " + _repeat(part, 20_000)}]
    if size == "long, other language":
        return [system, {"role": "user", "content": "Résume ce rapport. " + _repeat(_FRENCH, 20_000)}]
    if size == "40 turns":
        turns: list[dict[str, Any]] = [system]
        for i in range(40):
            turns.append({"role": "user", "content": f"Step {i}: " + _PROSE})
            turns.append({"role": "assistant", "content": _PROSE * 2})
        return [*turns, {"role": "user", "content": "What is the capital of France, and why?"}]
    raise ValueError(f"unknown request size {size!r}")


SIZES = ("short", "medium", "long prose", "long code", "long, other language", "40 turns")


def request_bytes(size: str) -> bytes:
    body = {
        "model": "auto",
        "messages": messages(size),
        "temperature": 0.2,
        "max_tokens": 512,
        "metadata": {"team": "search", "tier": "free"},
    }
    return json.dumps(body).encode()


def policy(served_model: str, candidates: list[str]) -> Policy:
    """A fitted policy of the 8 `POLICY_CLASSES` by `candidates`, with made-up but plausible measurements."""
    rng = random.Random(7)

    def arms() -> list[Arm]:
        return [
            Arm(candidate=c, score=round(rng.uniform(0.5, 0.95), 3), cost=round(rng.uniform(1e-4, 5e-3), 6), n=40)
            for c in candidates
        ]

    return Policy(
        served_model=served_model, version=3, created_at=1.7e9, unit="USD",
        classes={name: arms() for name in POLICY_CLASSES}, overall=arms(), sources={"tune": 320},
    )  # fmt: skip


def routers() -> dict[str, Router]:
    """`Router`s of the configs (module docstring)."""
    rules = [
        Rule(use=CANDIDATES[1], key="batch-jobs"),
        Rule(use=CANDIDATES[2], header="premium"),
        Rule(use=CANDIDATES[1], metadata={"tier": "gold"}),
        Rule(use=CANDIDATES[3], request_class="legal-review"),
        Rule(use=CANDIDATES[2], tools=True, min_chars=100_000),
    ]
    fitted = Router(Route(candidates=CANDIDATES))
    fitted.policy = policy("bench-auto", CANDIDATES)
    return {
        "default": Router(Route(candidates=CANDIDATES[:3])),
        "5 rules": Router(Route(candidates=CANDIDATES, rules=rules)),
        "class regex": Router(Route(candidates=CANDIDATES, classes=[RequestClass(name="review", pattern=REVIEW)])),
        "class regex, charset first": Router(
            Route(candidates=CANDIDATES, classes=[RequestClass(name="review", pattern=REVIEW_CHARSET_FIRST)])
        ),
        "policy 8x4": fitted,
    }


def service_config(classes: bool = True) -> Config:
    """The `auto` model over prefixed candidates, with the class regex (`classes`) or none."""
    return Config.from_dict(
        {
            "models": {"technique_prefixes": True, "upstream": "demo-direct"},
            "served_models": {
                "demo-direct": {
                    "mode": "direct",
                    "api": {"model": "adapter-critic-demo-model", "base_url": "/demo/v1"},
                },
                "auto": {
                    "mode": "auto",
                    "candidates": PREFIXED,
                    "classes": [{"name": "review", "pattern": REVIEW}] if classes else [],
                    "explore": 0.05,
                },
            },
        }
    )


# -- timing ---------------------------------------------------------------------------------------


class Case:
    """One request under one config: `batch(n)` routes it `n` times; `samples(n)` does too, timing each call (ns)."""

    def __init__(self, batch: Callable[[int], None], samples: Callable[[int], list[int]]) -> None:
        self.batch = batch
        self.samples = samples


def decide_case(router: Router, request: ChatRequest) -> Case:
    decide = router.decide

    def batch(n: int) -> None:
        for _ in range(n):
            decide(request, "team-search", None)

    def samples(n: int) -> list[int]:
        clock, out = time.perf_counter_ns, []
        for _ in range(n):
            began = clock()
            decide(request, "team-search", None)
            out.append(clock() - began)
        return out

    return Case(batch, samples)


def service_case(config: Config, routing: Routing, request: ChatRequest, loop: asyncio.AbstractEventLoop) -> Case:
    """`Routing.route` awaited `n` times in one coroutine, as the service awaits it."""
    plan = resolve(config, "auto", None)
    route = routing.route

    async def batch(n: int) -> None:
        for _ in range(n):
            await route(plan, request, "team-search", None, None)

    async def samples(n: int) -> list[int]:
        clock, out = time.perf_counter_ns, []
        for _ in range(n):
            began = clock()
            await route(plan, request, "team-search", None, None)
            out.append(clock() - began)
        return out

    return Case(lambda n: loop.run_until_complete(batch(n)), lambda n: loop.run_until_complete(samples(n)))


def timer_cost(n: int = 20_000) -> float:
    """The median ns of an empty `perf_counter_ns` pair: taken off every single-call sample."""
    clock, out = time.perf_counter_ns, []
    for _ in range(n):
        began = clock()
        out.append(clock() - began)
    return statistics.median(out)


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def calls_per_round(case: Case, seconds: float) -> int:
    """How many calls of `case` take about `seconds` of CPU (after a warm-up)."""
    case.batch(200)
    n = 100
    while True:
        began = time.process_time()
        case.batch(n)
        took = time.process_time() - began
        if took >= seconds / 4:
            return max(100, int(n * seconds / took))
        n *= 4


def cases_of(requests: dict[str, ChatRequest], loop: asyncio.AbstractEventLoop) -> dict[str, Case]:
    """Every request under every config, named `<config> / <request>`."""
    cases = {}
    for name, router in routers().items():
        for size, request in requests.items():
            cases[f"{name} / {size}"] = decide_case(router, request)
    for name in ("service", "service, policy"):
        config = service_config(classes=name == "service")
        routing = Routing(config)
        if name == "service, policy":
            routing.routers["auto"].policy = policy("auto", PREFIXED)
        for size, request in requests.items():
            cases[f"{name} / {size}"] = service_case(config, routing, request, loop)
    return cases


def run_all(quick: bool = False) -> dict[str, Any]:
    rounds, seconds = (5, 0.01) if quick else (21, 0.02)
    requests = {size: decode_request(request_bytes(size)) for size in SIZES}
    overhead = timer_cost()
    loop = asyncio.new_event_loop()
    try:
        cases = cases_of(requests, loop)
        calls = {name: calls_per_round(case, seconds) for name, case in cases.items()}
        means: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):  # every round times every case once, so the host's drift hits all alike
            for name, case in cases.items():
                began = time.process_time()
                case.batch(calls[name])
                means[name].append((time.process_time() - began) / calls[name] * 1e6)
        figures: dict[str, dict[str, Any]] = {}
        for name, case in cases.items():
            single = [max(0.0, (ns - overhead) / 1000) for ns in case.samples(max(calls[name], 2000))]
            median = statistics.median(means[name])
            figures[name] = {
                "calls_per_round": calls[name],
                "median_us": median,
                "p99_us": p99(means[name]),
                "call_p50_us": statistics.median(single),
                "call_p99_us": p99(single),
                "met": median <= TARGET_US,
                "pattern": name.partition(" / ")[0] in PATTERNED,
            }
    finally:
        loop.close()
    return {
        "target_us": TARGET_US,
        "rounds": rounds,
        "round_seconds": seconds,
        "timer_ns": overhead,
        "chars": {size: len(last_user_text(request.messages)) for size, request in requests.items()},
        "cases": figures,
    }


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets `run.py` prints: the dearest case's CPU per request (median of its rounds), of the configs without
    an operator class's pattern, and of those with one (its cost is the pattern's, which the operator writes)."""
    out = []
    for patterned, label in ((False, "no class pattern"), (True, "a class pattern")):
        cases = [(name, row) for name, row in results["cases"].items() if row["pattern"] == patterned]
        name, row = max(cases, key=lambda item: item[1]["median_us"])
        value, limit = row["median_us"], results["target_us"]
        out.append({"target": f"auto model routing, {label}: CPU µs/request, dearest case ({name})", "value": value,
                    "op": "≤", "limit": limit, "ok": value <= limit})  # fmt: skip
    return out


def format_table(results: dict[str, Any]) -> str:
    target = results["target_us"]
    lines = [
        f"routing a request for an auto model (benchmarks/router.py): CPU µs per request, median and p99 of "
        f"{results['rounds']} rounds' means; per call (wall, timer's {results['timer_ns']:.0f} ns taken off)",
        f"{'case':<52}{'µs CPU':>8}{'p99':>7}{'call p50':>10}{'call p99':>10}   target ≤ {target:g} µs",
    ]
    for name, row in results["cases"].items():
        mark = "met" if row["met"] else "not met"
        lines.append(
            f"{name:<52}{row['median_us']:>8.1f}{row['p99_us']:>7.1f}{row['call_p50_us']:>10.1f}"
            f"{row['call_p99_us']:>10.1f}   {mark}"
        )
    lines += [report.verdict(c) for c in checks(results)]
    return "\n".join(lines)


def main() -> None:
    cli(__doc__, run_all, format_table)


if __name__ == "__main__":
    main()
