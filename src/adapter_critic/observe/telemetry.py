"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A service's metrics and tracing, made as its config (`[telemetry]`) and the way it is served ask, before the parts
that report to them (the `GET /metrics` endpoint is `http.telemetry`'s).

`telemetry_for` makes them; the composition root (`service.compose`) hands their run-event subscribers, the
outbound `traceparent` and the in-flight gauge to the parts that use them. A switch that asks for a library that is
not installed turns the feature off with one log line saying what to install. The observers themselves
(`observe.metrics`, `observe.tracing`) know nothing of the service; this wiring does.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.telemetry import TelemetryConfig
from ..events import Subscriber
from .metrics import Metrics, StoreSource

if TYPE_CHECKING:
    from .tracing import Tracing

logger = logging.getLogger("adapter_critic")


@dataclass(frozen=True, slots=True)
class Telemetry:
    """A service's metrics and tracing; each None when off."""

    metrics: Metrics | None = None
    tracing: Tracing | None = None

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        """The run-event subscribers that feed them."""
        found: list[Subscriber] = []
        if self.tracing is not None:
            found.append(self.tracing.on_event)
        if self.metrics is not None:
            found.append(self.metrics.on_event)
        return tuple(found)

    @property
    def on_rate_limited(self) -> Callable[[str, str], None] | None:
        """What counts a request a limit refused (`limits.limits_for`'s `on_refused`); None: metrics are off."""
        metrics = self.metrics
        return None if metrics is None else lambda scope, limit: metrics.rate_limited.labels(scope, limit).inc()

    @property
    def on_limits_error(self) -> Callable[[str], None] | None:
        """What counts a failure of the limits' counters (`limits.limits_for`'s `on_error`); None: metrics are off."""
        metrics = self.metrics
        return None if metrics is None else lambda mode: metrics.limits_errors.labels(mode).inc()

    @property
    def inject(self) -> Callable[[dict[str, str]], None] | None:
        """What adds the current trace context to an upstream call's headers (None: tracing is off)."""
        return self.tracing.inject if self.tracing is not None else None

    @property
    def in_flight_gauge(self) -> Any:
        """The gauge admission counts requests in and out on: in multiprocess mode only, where each worker's count
        lives in its file (otherwise the gauge reads the count at a scrape: `watch`)."""
        return self.metrics.in_flight if self.metrics is not None and self.metrics.multiprocess else None

    def watch(self, in_flight: Callable[[], int], store: StoreSource) -> None:
        """Read the requests in flight and the run store's queue (`store` returns the store, or None) at a scrape."""
        if self.metrics is None:
            return
        if not self.metrics.multiprocess:
            self.metrics.in_flight.set_function(in_flight)  # read at a scrape, nothing per request
        self.metrics.watch_store(store)


def telemetry_for(settings: TelemetryConfig, *, standalone: bool, priced: bool = False) -> Telemetry:
    """Metrics and tracing as `settings` ask; metrics are on by default only for the standalone server. `priced`:
    the config has prices, so runs have costs to count."""
    tracing: Tracing | None = None
    if settings.tracing:
        if importlib.util.find_spec("opentelemetry") is None:
            logger.warning("tracing is off: it needs OpenTelemetry; pip install 'adapter_critic[otel]'")
        else:
            from .tracing import Tracing, provider_is_set

            tracing = Tracing()
            if not provider_is_set():
                logger.info(
                    "tracing is on, but no OpenTelemetry SDK is set up (yet): spans are dropped until the host sets "
                    "a tracer provider, e.g. by running the server under `opentelemetry-instrument`"
                )
    wanted = settings.metrics if settings.metrics is not None else standalone
    if not wanted:
        return Telemetry(tracing=tracing)
    if importlib.util.find_spec("prometheus_client") is None:
        log = logger.warning if settings.metrics else logger.info
        log(
            "metrics are off (no GET %s): they need prometheus-client; pip install 'adapter_critic[metrics]'",
            settings.metrics_path,
        )
        return Telemetry(tracing=tracing)
    return Telemetry(metrics=Metrics(priced=priced), tracing=tracing)
