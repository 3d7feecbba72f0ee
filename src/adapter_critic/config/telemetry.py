"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `[telemetry]` table of the config: Prometheus metrics and OpenTelemetry tracing switches."""

from __future__ import annotations

from typing import Annotated

import msgspec


class TelemetryConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What the server reports about itself (see `observe.metrics`, `observe.tracing`).

    `metrics`: serve `GET <metrics_path>` in the Prometheus text format (needs `prometheus-client`, the `[server]`
    extra); None (the default) means on for the standalone server and off when mounted or used as middleware.
    `metrics_path` is where: under the mount for a mounted app, at the server's root standalone (`/metrics`, beside
    `/v1`), and the path the middleware answers. `tracing`: an OpenTelemetry span per run and per stage call (needs
    the `[otel]` extra); spans never carry message text, answers or keys.
    """

    metrics: bool | None = None
    metrics_path: Annotated[str, msgspec.Meta(pattern=r"^/[^?#]*$")] = "/metrics"
    tracing: bool = False
