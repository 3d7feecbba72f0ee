"""Turning a service's metrics and tracing on, as its config (`[telemetry]`) and the way it is served ask, and the
`GET /metrics` endpoint.

`install` adds the run-event subscribers to the service, the in-flight gauge to its admission and the outbound
`traceparent` to its upstream calls, and returns the metrics endpoint (None when metrics are off). A switch that
asks for a library that is not installed turns the feature off with one log line saying what to install.
The observers themselves (`observe.metrics`, `observe.tracing`) know nothing of the service; this wiring does.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

import anyio.to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..observe.metrics import Metrics

if TYPE_CHECKING:
    from .chat import Service

logger = logging.getLogger("adapter_critic")


def install(service: Service, *, standalone: bool) -> MetricsEndpoint | None:
    """Metrics and tracing for `service`; metrics are on by default only for the standalone server."""
    settings = service.config.telemetry
    if settings.tracing:
        if importlib.util.find_spec("opentelemetry") is None:
            logger.warning("tracing is off: it needs OpenTelemetry; pip install 'adapter_critic[otel]'")
        else:
            from ..observe.tracing import Tracing, provider_is_set

            tracing = Tracing()
            if not provider_is_set():
                logger.info(
                    "tracing is on, but no OpenTelemetry SDK is set up (yet): spans are dropped until the host sets "
                    "a tracer provider, e.g. by running the server under `opentelemetry-instrument`"
                )
            service.tracing = tracing
            service.upstream.inject = tracing.inject
            service.subscribers = (*service.subscribers, tracing.on_event)
    wanted = settings.metrics if settings.metrics is not None else standalone
    if not wanted:
        return None
    if importlib.util.find_spec("prometheus_client") is None:
        log = logger.warning if settings.metrics else logger.info
        log(
            "metrics are off (no GET %s): they need prometheus-client; pip install 'adapter_critic[metrics]'",
            settings.metrics_path,
        )
        return None
    metrics = Metrics()
    service.metrics = metrics
    service.subscribers = (*service.subscribers, metrics.on_event)
    if metrics.multiprocess:
        service.admission.gauge = metrics.in_flight  # each worker's count lives in its file, summed at a scrape
    else:
        admission = service.admission
        metrics.in_flight.set_function(lambda: admission.in_flight)  # read at a scrape, nothing per request
    metrics.watch_store(lambda: getattr(service, "store", None))  # the run store, once the service has one
    return MetricsEndpoint(metrics)


class MetricsEndpoint:
    """`GET /metrics`: every series in the Prometheus text format (read off the event loop when it means reading
    every worker's files)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics.multiprocess:
            body, content_type = await anyio.to_thread.run_sync(self.metrics.render)
        else:
            body, content_type = self.metrics.render()
        await Response(body, headers={"content-type": content_type})(scope, receive, send)
