"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Prometheus metrics: the series a server exports, fed by a run-event subscriber (`Metrics.on_event`) and by the
HTTP layer (requests in flight: read from it at a scrape, or counted by it per request in multiprocess mode), and
their exposition in the Prometheus text format (`Metrics.render`).

`prometheus-client` (the `[server]` or `[metrics]` extra) is imported only when metrics are on. Under
`uvicorn --workers N` every worker writes its numbers to files in `PROMETHEUS_MULTIPROC_DIR` (prometheus-client's
multiprocess mode, chosen when that variable is set before the first import) and a scrape of any worker answers
the sum over all of them; `observe.workers` sets that directory up for the standalone server.

The subscriber's work per event is a type check, a dict lookup of the series' labelled children and an add:
nothing waits, nothing is allocated per event on the hot path.

`adapter_critic_cost_total` counts what stage calls cost (`pricing`), known costs only (a call whose cost is unknown
adds nothing), by served model, stage, target model and currency; it exists only when prices are configured
(`priced`), and only then is a run's served model kept for its stage calls.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..events import AnswerChunks, Event, RunFinished, RunStarted, StageFinished
from .targets import target_name

PREFIX = "adapter_critic"
# Seconds: LLM calls range from milliseconds (a cached answer) to minutes (a long reasoning answer).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# More distinct target models than this (per-request overrides can name any) are counted as `other`.
MAX_TARGET_MODELS = 100

_now = time.perf_counter


# Where the run store is, when there is one: read at every scrape (and, in multiprocess mode, as runs finish), so
# a store made later (at start-up) is found. Its `queue_depth` (records waiting to be written) and `dropped`
# (records dropped so far, a count that only grows) are exported.
StoreSource = Callable[[], object | None]


@dataclass(slots=True)
class _Stream:
    """A streamed run's clock, until its first answer token went out."""

    started: float
    served_model: str
    mode: str
    seen: bool = False


@dataclass(slots=True)
class _Stage:
    """The labelled children of one (stage, target) pair."""

    duration: Any
    tokens_in: Any
    tokens_out: Any
    retries: Any


_stream: contextvars.ContextVar[_Stream | None] = contextvars.ContextVar("adapter_critic_metrics_stream", default=None)
# The served model of the run whose events these are (set at its start, seen by its stage calls' tasks): only when
# priced, for the cost series' label.
_served: contextvars.ContextVar[str] = contextvars.ContextVar("adapter_critic_metrics_served", default="")


class Metrics:
    """The series of one server (one per app or middleware instance), in a registry of its own.

    A run store's queue depth and drops are read from `watch_store`'s source at every scrape, and in multiprocess
    mode as runs finish too (a scrape of another worker reads this one's file)."""

    def __init__(self, *, priced: bool = False) -> None:
        import prometheus_client as prom

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = prom.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = prom.Counter(
            f"{PREFIX}_requests", "Runs finished, by served model, mode and status (ok, degraded, error, cancelled).",
            ["served_model", "mode", "status"], registry=r,
        )  # fmt: skip
        self.duration = prom.Histogram(
            f"{PREFIX}_request_duration_seconds", "Run duration, from the run's start to its end.",
            ["served_model", "mode"], buckets=BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft = prom.Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Streamed runs: time from the run's start to the first answer token sent to the client.",
            ["served_model", "mode"], buckets=BUCKETS, registry=r,
        )  # fmt: skip
        self.stage_duration = prom.Histogram(
            f"{PREFIX}_stage_duration_seconds", "Stage call duration (retries and fallbacks included).",
            ["stage", "target_model"], buckets=BUCKETS, registry=r,
        )  # fmt: skip
        self.tokens = prom.Counter(
            f"{PREFIX}_tokens", "Tokens the upstreams reported, by stage and direction (input, output).",
            ["stage", "direction"], registry=r,
        )  # fmt: skip
        self.upstream_errors = prom.Counter(
            f"{PREFIX}_upstream_errors", "Failed upstream attempts, by stage and kind (status, timeout, unreachable, "
            "bad_answer).", ["stage", "kind"], registry=r,
        )  # fmt: skip
        self.retries = prom.Counter(
            f"{PREFIX}_retries", "Upstream attempts after a stage call's first (retries and fallbacks), by stage.",
            ["stage"], registry=r,
        )  # fmt: skip
        self.degraded = prom.Counter(
            f"{PREFIX}_degraded", "Runs answered with the answer so far after a later stage failed.",
            ["served_model", "mode"], registry=r,
        )  # fmt: skip
        self.in_flight = prom.Gauge(
            f"{PREFIX}_requests_in_flight", "Chat requests being served now (admitted, not yet answered).",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.store_queue = prom.Gauge(
            f"{PREFIX}_store_queue_depth", "Run-store records waiting to be written.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.store_dropped = prom.Counter(
            f"{PREFIX}_store_dropped_records", "Run-store records dropped because the write queue was full.",
            registry=r,
        )  # fmt: skip
        self.priced = priced
        self.cost = (
            prom.Counter(
                f"{PREFIX}_cost",
                "What stage calls cost, in the currency of the config's prices: known costs only, by "
                "served model, stage, target model and currency.",
                ["served_model", "stage", "target_model", "currency"],
                registry=r,
            )
            if priced
            else None
        )
        self.rate_limited = prom.Counter(
            f"{PREFIX}_rate_limited", "Requests refused 429 by a limit, by whose limit (key, model) and which.",
            ["scope", "limit"], registry=r,
        )  # fmt: skip
        self.limits_errors = prom.Counter(
            f"{PREFIX}_limits_errors", "Failed reads or updates of the limits' counters (`limits.url`), by what the "
            "request then got (`limits.on_error`: open, closed).", ["on_error"], registry=r,
        )  # fmt: skip
        self.feedback = prom.Counter(
            f"{PREFIX}_feedback", "Feedback entries given on runs through the runs API, by the run's served model "
            "and verdict (accept, reject: a stage's; else positive, negative, neutral: the score's sign).",
            ["served_model", "verdict"], registry=r,
        )  # fmt: skip
        self.shadows = prom.Counter(
            f"{PREFIX}_shadow_runs", "Shadow evaluations (docs/guides/routing.md), by served model, candidate and "
            "outcome (the candidate's: won, tied, lost, failed; or dropped: at its concurrency, over_budget).",
            ["served_model", "candidate", "outcome"], registry=r,
        )  # fmt: skip
        self.shadow_tokens = prom.Counter(
            f"{PREFIX}_shadow_tokens", "Tokens shadow candidates and their judges spent (the operator's, never a "
            "caller's), by served model.", ["served_model"], registry=r,
        )  # fmt: skip
        self.shadow_cost = prom.Counter(
            f"{PREFIX}_shadow_cost", "What shadow candidates and their judges cost (known costs), by served model "
            "and currency.", ["served_model", "currency"], registry=r,
        )  # fmt: skip
        self.routes = prom.Counter(
            f"{PREFIX}_route_decisions", "Requests an `auto` model routed, by served model, candidate and why (rule, "
            "policy, explore, default).", ["served_model", "candidate", "by"], registry=r,
        )  # fmt: skip
        self.store_source: StoreSource | None = None
        self._store: object | None = None
        self._store_dropped_seen = 0
        self._runs: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}
        self._stages: dict[tuple[str, str], _Stage] = {}
        self._costs: dict[tuple[str, str, str, str], Any] = {}
        self._ttft: dict[tuple[str, str], Any] = {}
        self._models: set[str] = set()
        if self.multiprocess:
            from prometheus_client import multiprocess

            # This worker's live gauges (in flight, store queue) leave the sum when it exits.
            atexit.register(multiprocess.mark_process_dead, os.getpid())

    # -- the run-event subscriber --------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Count a run's events. A child run (a stage run by another served model) is part of its parent's request:
        its stage calls are counted, the parent's stage that ran it (no upstream call of its own) and the child run
        itself are not."""
        kind = type(event)
        if kind is StageFinished:
            assert isinstance(event, StageFinished)
            if event.child is None:
                self._stage_finished(event)
        elif kind is AnswerChunks:
            stream = _stream.get()
            if stream is not None and not stream.seen:
                stream.seen = True
                self._ttft_child(stream.served_model, stream.mode).observe(_since(stream.started))
        elif kind is RunStarted:
            assert isinstance(event, RunStarted)
            if event.stream and event.parent is None:
                _stream.set(_Stream(_now(), event.served_model, event.mode))
            if self.priced:
                _served.set(event.served_model)
        elif kind is RunFinished:
            assert isinstance(event, RunFinished)
            if event.record.parent is None:
                self._run_finished(event)

    def _stage_finished(self, event: StageFinished) -> None:
        key = (event.stage, event.target)
        stage = self._stages.get(key)
        if stage is None:
            stage = self._stages[key] = self._stage_children(event.stage, event.target)
        stage.duration.observe(event.elapsed_ms / 1000)
        usage = event.usage
        if usage.prompt_tokens:
            stage.tokens_in.inc(usage.prompt_tokens)
        if usage.completion_tokens:
            stage.tokens_out.inc(usage.completion_tokens)
        if len(event.attempts) > 1:
            stage.retries.inc(len(event.attempts) - 1)
        for attempt in event.attempts:
            if attempt.error is not None:
                self.upstream_errors.labels(event.stage, attempt.error.kind).inc()
        cost = event.cost
        if cost is not None and cost.amount and self.cost is not None:
            served = _served.get()
            labels = (served, event.stage, event.target, cost.currency)
            child = self._costs.get(labels)
            if child is None:
                model = self._model(event.target)
                child = self._costs[labels] = self.cost.labels(served, event.stage, model, cost.currency)
            child.inc(cost.amount)

    def _model(self, label: str) -> str:
        """The `target_model` label of a target: its model, or `other` past `MAX_TARGET_MODELS` of them."""
        model = target_name(label).model
        if model not in self._models:
            if len(self._models) >= MAX_TARGET_MODELS:
                return "other"
            self._models.add(model)
        return model

    def _stage_children(self, stage: str, label: str) -> _Stage:
        model = self._model(label)
        return _Stage(
            self.stage_duration.labels(stage, model),
            self.tokens.labels(stage, "input"),
            self.tokens.labels(stage, "output"),
            self.retries.labels(stage),
        )

    def _run_finished(self, event: RunFinished) -> None:
        record = event.record
        key = (record.served_model, record.mode, event.status)
        children = self._runs.get(key)
        if children is None:
            children = self._runs[key] = (
                self.requests.labels(*key),
                self.duration.labels(record.served_model, record.mode),
                self.degraded.labels(record.served_model, record.mode),
            )
        requests, duration, degraded = children
        requests.inc()
        duration.observe(record.elapsed_ms() / 1000)
        if event.status == "degraded":
            degraded.inc()
        stream = _stream.get()
        if stream is not None:
            if not stream.seen and event.status in ("ok", "degraded"):
                # The answer was known whole (an adapter's, a degraded draft): it goes out now, at once.
                self._ttft_child(stream.served_model, stream.mode).observe(_since(stream.started))
            _stream.set(None)
        if self.multiprocess and self.store_source is not None:
            self._sync_store()  # a scrape of another worker reads this one's file: keep it current

    def _ttft_child(self, served_model: str, mode: str) -> Any:
        child = self._ttft.get((served_model, mode))
        if child is None:
            child = self._ttft[(served_model, mode)] = self.ttft.labels(served_model, mode)
        return child

    def count_feedback(self, served_model: str, verdict: str) -> None:
        """Count a feedback entry kept on a run of `served_model` (`store.feedback.verdict_label`)."""
        self.feedback.labels(served_model, verdict).inc()

    def count_shadow(
        self, served_model: str, candidate: str, outcome: str, tokens: int = 0, cost: tuple[str, float] | None = None
    ) -> None:
        """Count a shadow evaluation of `served_model` (or one dropped), and what it spent."""
        self.shadows.labels(served_model, candidate, outcome).inc()
        if tokens:
            self.shadow_tokens.labels(served_model).inc(tokens)
        if cost is not None and cost[1]:
            self.shadow_cost.labels(served_model, cost[0]).inc(cost[1])

    def count_route(self, served_model: str, candidate: str, by: str) -> None:
        """Count a request an `auto` model routed."""
        self.routes.labels(served_model, candidate, by).inc()

    # -- the run store -------------------------------------------------------------------------------
    def watch_store(self, source: StoreSource) -> None:
        """Export the queue depth and drops of the store `source` returns (None: no store, nothing to export)."""
        self.store_source = source
        self._sync_store()

    def _sync_store(self) -> None:
        store = self.store_source() if self.store_source is not None else None
        if store is None:
            return
        depth = getattr(store, "queue_depth", None)
        if isinstance(depth, int):
            self.store_queue.set(depth)
        dropped = getattr(store, "dropped", None)
        if isinstance(dropped, int):
            if store is not self._store:  # a new store counts its drops from zero
                self._store, self._store_dropped_seen = store, 0
            if dropped > self._store_dropped_seen:
                self.store_dropped.inc(dropped - self._store_dropped_seen)
                self._store_dropped_seen = dropped

    # -- exposition ----------------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """Every series in the Prometheus text format, and its content type; in multiprocess mode, summed over the
        server's workers."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        self._sync_store()
        if not self.multiprocess:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST


def _since(started: float) -> float:
    return _now() - started
