"""Three replicas, one store, a replica killed mid-load: `python -m benchmarks.replicas [--requests N]
[--concurrency C] [--stay-down]` prints what happened (tests/deploy/test_replicas.py asserts it).

The load goes through HAProxy (`benchmarks.cluster`): plain and streamed requests for a `direct` and a `critic`
served model in turn, each with its own `x-request-id` (`load-<n>`, which becomes its run's `request_id`) and a
token its answer must echo. When 30 % have been answered, replica r2 is killed with SIGKILL while HAProxy says it
has requests in flight; when 50 % have, it is started again on its port (with `--stay-down`, it is not, and the
live replicas mark its runs `interrupted` instead: the cluster then beats every second).

Afterwards: what each request got (an answer, checked against its token, or a failure and what kind), what
HAProxy logged for it, every run in the store as each replica's `/v1/runs` lists it, each replica's
`adapter_critic_requests_total`, and HAProxy's per-replica count of answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from .cluster import Cluster, cluster

KINDS = (("direct", False), ("direct", True), ("critic", False), ("critic", True))
# HAProxy's counters per server: requests sent (`stot`, redispatched ones included), 2xx answers begun
# (`hrsp_2xx`), requests moved to another server after a failed connection (`wredis`), answers the server cut short
# (`srv_abrt`), and failed responses (`eresp`).
COUNTERS = ("stot", "hrsp_2xx", "wredis", "srv_abrt", "eresp")


@dataclass
class Outcome:
    """What the client got for one request."""

    request_id: str
    model: str
    stream: bool
    answer: str | None = None  # the answer's text, when one came whole
    run_id: str | None = None
    failure: str | None = None  # how it failed: "connection" (closed or cut), "status <n>", "wrong answer"


@dataclass
class Report:
    outcomes: list[Outcome]
    logged: dict[str, tuple[str, int, str]]  # HAProxy's log: request id -> (server, status, termination state)
    runs: dict[str, list[dict[str, Any]]]  # each replica's listing of every run in the store
    metrics: dict[str, float]  # each replica's adapter_critic_requests_total (its current process)
    answered: dict[str, int]  # HAProxy's count of 2xx answers per replica, since its current process started
    haproxy: dict[str, dict[str, int]]  # HAProxy's counters per replica at the end (COUNTERS)
    killed: str
    killed_in_flight: int  # HAProxy's current sessions on the killed replica just before the kill
    marked_seconds: float | None  # restart (or kill, with --stay-down) until its runs were marked interrupted
    marked_by: list[str] = field(default_factory=list)  # the replicas whose logs say they marked runs interrupted
    seconds: float = 0.0


async def _one(client: httpx.AsyncClient, n: int) -> Outcome:
    model, stream = KINDS[n % len(KINDS)]
    outcome = Outcome(f"load-{n}", model, stream)
    body = {"model": model, "messages": [{"role": "user", "content": f"token-{n}"}], "stream": stream}
    headers = {"x-request-id": outcome.request_id}
    try:
        if stream:
            text, run_id = "", None
            async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as answer:
                if answer.status_code != 200:
                    outcome.failure = f"status {answer.status_code}"
                    return outcome
                async for line in answer.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        for choice in chunk.get("choices") or []:
                            text += choice.get("delta", {}).get("content") or ""
                        run_id = (chunk.get("adapter_critic") or {}).get("run_id", run_id)
            outcome.answer, outcome.run_id = text, run_id
        else:
            answer = await client.post("/v1/chat/completions", json=body, headers=headers)
            if answer.status_code != 200:
                outcome.failure = f"status {answer.status_code}"
                return outcome
            data = answer.json()
            outcome.answer, outcome.run_id = data["choices"][0]["message"]["content"], data["id"]
    except httpx.TransportError:
        outcome.failure = "connection"
        return outcome
    if f"token-{n}" not in (outcome.answer or "") or outcome.run_id is None:
        outcome.failure = "wrong answer"
    return outcome


async def _load(c: Cluster, requests: int, concurrency: int, stay_down: bool) -> Report:
    victim = c.replicas[1]
    outcomes: list[Outcome] = []
    progress = asyncio.Condition()
    queue = iter(range(requests))
    started = time.monotonic()

    # The last 40 % wait until the restarted replica is back in HAProxy's rotation, so it serves some of them.
    back, gate_at = asyncio.Event(), requests * 6 // 10

    async def worker(client: httpx.AsyncClient) -> None:
        for n in queue:
            if n >= gate_at and not stay_down:
                await back.wait()
            outcome = await _one(client, n)
            async with progress:
                outcomes.append(outcome)
                progress.notify_all()

    async def reached(count: int) -> None:
        async with progress:
            await progress.wait_for(lambda: len(outcomes) >= count)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=c.balancer.url, timeout=60, limits=limits) as client:
        workers = [asyncio.create_task(worker(client)) for _ in range(concurrency)]
        await reached(requests * 3 // 10)
        in_flight = 0
        while in_flight == 0:  # kill it while it serves: wait for the next answer until HAProxy says it does
            in_flight = int(c.balancer.stats()[victim.name]["scur"])
            if in_flight == 0:
                await reached(len(outcomes) + 1)
        assert victim.proc is not None
        pid = victim.proc.pid
        victim.kill()
        killed_at = time.monotonic()
        marked: float | None = None
        if not stay_down:
            await reached(requests // 2)
            before = int(c.balancer.stats()[victim.name]["hrsp_2xx"])  # its counts so far: the killed process's
            restarted_at = time.monotonic()
            restart = asyncio.create_task(asyncio.to_thread(victim.start))
            marked = await _until_marked(c, pid, restarted_at)
            await restart
            await asyncio.to_thread(c.balancer.until_up, [victim.name])
            back.set()
        else:
            before = int(c.balancer.stats()[victim.name]["hrsp_2xx"])
            marked = await _until_marked(c, pid, killed_at)
        await asyncio.gather(*workers)
    seconds = time.monotonic() - started
    await asyncio.to_thread(_until_recorded, c, outcomes, victim.name)
    stats = c.balancer.stats()
    answered = {r.name: int(stats[r.name]["hrsp_2xx"]) for r in c.replicas}
    live = [r for r in c.replicas if r is not victim or not stay_down]
    answered[victim.name] -= before
    return Report(
        outcomes=sorted(outcomes, key=lambda o: int(o.request_id.split("-")[1])),
        logged=c.balancer.log_lines(),
        runs={r.name: _all_runs(r.url) for r in live},
        metrics={r.name: _requests_total(r.url) for r in live},
        answered={name: count for name, count in answered.items() if any(r.name == name for r in live)},
        haproxy={r.name: {name: int(stats[r.name][name]) for name in COUNTERS} for r in c.replicas},
        killed=victim.name,
        killed_in_flight=in_flight,
        marked_seconds=marked,
        marked_by=[r.name for r in c.replicas if "marked interrupted" in r.log.read_text(errors="replace")],
        seconds=seconds,
    )


async def _until_marked(c: Cluster, pid: int, since: float, wait: float = 300) -> float:
    """Seconds from `since` until the killed process (`pid`) is no longer in the store's `instances` table: the
    transaction that removes it marks its runs `interrupted`."""
    deadline = time.monotonic() + wait
    conn = await asyncpg.connect(c.store_url)
    try:
        while await conn.fetchval("SELECT count(*) FROM instances WHERE pid = $1", pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the runs of process {pid} were not marked interrupted within {wait} s")
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return time.monotonic() - since


def _until_recorded(c: Cluster, outcomes: list[Outcome], killed: str, wait: float = 60) -> None:
    """Wait until the store has every run the live replicas answered, and none left `running` (the replicas write
    in the background)."""
    served = {rid: server for rid, (server, _, _) in c.balancer.log_lines().items()}
    expected = {o.run_id for o in outcomes if not o.failure and served.get(o.request_id) != killed}
    deadline = time.monotonic() + wait
    reader = c.replicas[0]
    while time.monotonic() < deadline:
        runs = _all_runs(reader.url)
        if expected <= {run["id"] for run in runs} and all(run["status"] != "running" for run in runs):
            return
        time.sleep(0.05)


def _all_runs(url: str, status: str | None = None) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000, **({"status": status} if status else {})}
    while True:
        page = httpx.get(f"{url}/v1/runs", params=params, timeout=30).json()
        runs += page["data"]
        if not page["has_more"]:
            return runs
        params["cursor"] = page["next_cursor"]


def _requests_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "adapter_critic_requests_total"
    )


def run(requests: int = 400, concurrency: int = 12, stay_down: bool = False) -> Report:
    with cluster(replicas=3, heartbeat_seconds=1.0 if stay_down else 30.0) as c:
        return asyncio.run(_load(c, requests, concurrency, stay_down))


def summary(report: Report) -> dict[str, Any]:
    """The figures: requests, failures and where they were, runs stored, time until marked interrupted."""
    failed = [o for o in report.outcomes if o.failure]
    listing = next(iter(report.runs.values()))
    statuses: dict[str, int] = {}
    for run_ in listing:
        statuses[run_["status"]] = statuses.get(run_["status"], 0) + 1
    stored = {r["id"]: r["status"] for r in listing}
    answered_ids = [o.run_id for o in report.outcomes if not o.failure]
    return {
        "requests": len(report.outcomes),
        "answered": len(answered_ids),
        "failed": len(failed),
        "failed_on_killed_replica": unfinished(report.haproxy[report.killed]),
        "failures_by_kind": {kind: sum(o.failure == kind for o in failed) for kind in {o.failure for o in failed}},
        "killed_replica_in_flight_at_kill": report.killed_in_flight,
        "redispatched_from_killed_replica": report.haproxy[report.killed]["wredis"],
        "runs_stored": len(listing),
        "runs_by_status": statuses,
        "answered_but_stored_interrupted": sum(stored.get(i or "") == "interrupted" for i in answered_ids),
        "answered_but_not_stored": sum((i or "") not in stored for i in answered_ids),
        "seconds_until_marked_interrupted": None if report.marked_seconds is None else round(report.marked_seconds, 2),
        "marked_by": report.marked_by,
        "metrics_requests_total": report.metrics,
        "haproxy_answered": report.answered,
        "load_seconds": round(report.seconds, 1),
    }


def unfinished(counters: dict[str, int]) -> int:
    """A replica's requests, by HAProxy's counters, that it did not answer whole: sent to it, not moved to another
    replica, and not a 2xx answer that it finished (a 2xx it cut short is `srv_abrt`)."""
    return counters["stot"] - counters["wredis"] - counters["hrsp_2xx"] + counters["srv_abrt"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--stay-down", action="store_true", help="do not restart the killed replica")
    args = parser.parse_args()
    print(json.dumps(summary(run(args.requests, args.concurrency, args.stay_down)), indent=2))


if __name__ == "__main__":
    main()
