"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET /metrics`: a service's Prometheus metrics (`observe.telemetry` makes them) as an ASGI endpoint."""

from __future__ import annotations

import anyio.to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..observe.metrics import Metrics
from ..observe.telemetry import Telemetry


def metrics_endpoint(telemetry: Telemetry) -> MetricsEndpoint | None:
    """`GET /metrics` (None when metrics are off)."""
    return MetricsEndpoint(telemetry.metrics) if telemetry.metrics is not None else None


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
