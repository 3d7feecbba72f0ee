"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `[telemetry]` table of the config: Prometheus metrics and OpenTelemetry tracing switches."""

from __future__ import annotations

from typing import Annotated

import msgspec


class TelemetryConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What the server reports about itself: Prometheus metrics and OpenTelemetry spans.

    Spans never carry message text, answers or keys (`observe.metrics`, `observe.tracing`)."""

    metrics: bool | None = None
    """Serve Prometheus metrics (needs `prometheus-client`, in the `server` extra); not set: on for the standalone
    server, off when mounted or used as middleware."""
    metrics_path: Annotated[str, msgspec.Meta(pattern=r"^/[^?#]*$")] = "/metrics"
    """Where the metrics are served: beside `/v1` standalone, under the mount for a mounted app, on the wrapped
    app's paths for the middleware."""
    tracing: bool = False
    """An OpenTelemetry span per run and per stage call (needs the `otel` extra)."""
