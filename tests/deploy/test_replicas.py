"""Three replicas behind HAProxy sharing one PostgreSQL run store, one of them killed with SIGKILL mid-load and
started again (`benchmarks.replicas`, which prints the same figures): no request a live replica got fails, the
killed one's fail as closed connections (never a wrong answer), every run is stored once and readable from every
replica, the killed replica's unfinished runs end `interrupted`, and the replicas' metrics add up to HAProxy's
count of answers."""

from __future__ import annotations

from benchmarks import replicas
from benchmarks.cluster import missing_tools

from ..conftest import unavailable


def test_a_replica_killed_mid_load_fails_only_its_own_requests() -> None:
    reason = missing_tools()
    if reason is not None:
        unavailable(reason)
    report = replicas.run(requests=240, concurrency=12)
    killed = report.killed
    failed = [o for o in report.outcomes if o.failure]
    summary = replicas.summary(report)

    # Failures are closed connections, never a wrong answer (each answer echoes its own request's token).
    assert {o.failure for o in failed} <= {"connection"}, summary
    # Every request HAProxy sent to a live replica was answered whole...
    for name, counters in report.haproxy.items():
        if name != killed:
            assert replicas.unfinished(counters) == 0 and counters["eresp"] == 0, (name, counters)
    # ... and every failure was one of the killed replica's unfinished requests, by HAProxy's count.
    assert len(failed) == replicas.unfinished(report.haproxy[killed]) >= 1, summary
    assert all(server == killed for server, _, ended in report.logged.values() if ended != "----")

    # One store, the same runs read from every replica; each run once, each request at most one run.
    listings = {name: sorted(run["id"] for run in runs) for name, runs in report.runs.items()}
    first = next(iter(report.runs.values()))
    assert len(listings) == 3 and all(ids == listings["r1"] for ids in listings.values())
    assert len({run["id"] for run in first}) == len({run["request_id"] for run in first}) == len(first)
    by_request = {run["request_id"]: run for run in first}
    assert set(by_request) <= {o.request_id for o in report.outcomes}
    # None left running: the killed replica's unfinished runs are interrupted.
    assert {run["status"] for run in first} <= {"ok", "interrupted"}
    for outcome in report.outcomes:
        run = by_request.get(outcome.request_id)
        server = report.logged.get(outcome.request_id, ("?",))[0]
        if outcome.failure:
            assert run is None or run["status"] == "interrupted", (outcome, run)
        elif server != killed:  # answered by a live replica: recorded, as it ended
            assert run is not None and run["id"] == outcome.run_id and run["status"] == "ok", (outcome, run)
        else:  # answered by the killed replica: recorded unless still queued in its memory when it was killed
            assert run is None or (run["id"] == outcome.run_id and run["status"] in ("ok", "interrupted"))
    assert report.marked_seconds is not None and report.marked_by, summary

    # Each replica's adapter_critic_requests_total is HAProxy's count of its answers (the restarted one's since its
    # restart: a killed process's counters die with it), so they add up to the balancer's.
    assert report.metrics == report.answered, summary
    assert sum(report.metrics.values()) == sum(report.answered.values()) > 0
