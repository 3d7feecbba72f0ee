"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The composition root: every part of one service built from its config in one place (`compose`), the chat service
given the parts it uses, and the whole handed to what serves it (`http.app.build_app`, the middleware, `eval`).

Each part is made once and passed in, so nothing is wired into a part after it is made: the metrics and tracing
exist before the upstream client, the admission and the chat service that report to them. The secrets a part masks are
this service's alone (`redact.masked_logs`), so two services in one process never mask, or keep, each other's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
from starlette.types import ASGIApp  # the type of an in-process upstream (the demo model, a wrapped app)

from ..cache.answers import cache_for
from ..config import Config
from ..events import Subscriber
from ..limits import limits_for
from ..observe.logs import protect_request_ids, request_log
from ..observe.telemetry import Telemetry, telemetry_for
from ..protocols import registry as protocols
from ..protocols.registry import Sides
from ..redact import Secrets, masked_logs, protect_logs
from ..store.settings import recording_store
from ..upstream.client import Upstream
from ..upstream.pinning import HostGuard
from ..upstream.retry import RetryPolicy, Sleep
from .admission import Admission
from .chat import ChatService
from .keys import KeyRing
from .routing import Routing
from .shadow import Shadows

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..store.runstore import RunStore


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """One app's or middleware's parts: the chat service, and what the routes around it use."""

    config: Config
    chat: ChatService
    secrets: Secrets
    keys: KeyRing  # who may call
    protocols: Sides  # every registered protocol's sides: the routes clients may call, the wires targets are called on
    telemetry: Telemetry  # its metrics and tracing (each None when off)
    standalone: bool  # composed with the standalone server's defaults (metrics and the viewer on)

    @property
    def upstream(self) -> Upstream:
        return self.chat.upstream

    @property
    def admission(self) -> Admission:
        return self.chat.admission

    @property
    def on_feedback(self) -> Callable[[str, str], None] | None:
        """What counts a feedback entry kept (served model, verdict); None when metrics are off."""
        metrics = self.telemetry.metrics
        return None if metrics is None else metrics.count_feedback

    @property
    def store(self) -> RunStore | None:
        """The run store (None: not recording)."""
        return self.chat.store


def compose(
    config: Config,
    *,
    standalone: bool = False,
    http_client: httpx.AsyncClient | None = None,
    in_process_app: ASGIApp | None = None,
    sleep: Sleep | None = None,
    subscribers: Sequence[Subscriber] = (),
    store_default: str | None = None,
    host_guard: HostGuard | None = None,
    clock: Callable[[], float] = time.time,
) -> Service:
    """Build a service's parts from `config`.

    Parameters:
        standalone: the standalone server's defaults: metrics on unless `[telemetry]` says otherwise (and, in
            `build_app`, the viewer).
        http_client: an `httpx.AsyncClient` for upstream calls instead of the service's own (never closed by it).
        in_process_app: the ASGI app that stage targets whose `base_url` is a path are called on (the middleware's
            wrapped app, the demo model).
        sleep: the async function that waits between retries (default `anyio.sleep`).
        subscribers: run-event subscribers besides the request log, metrics and tracing.
        store_default: the run store's URL when neither the config nor the environment names one (the standalone
            server's SQLite file; None: not recording).
        host_guard: what resolves and checks the host names of override URLs only `"*"` allows.
        clock: the limits' and the cache's clock (Unix seconds).
    """
    protect_request_ids()
    protect_logs()
    secrets = Secrets(config.key_env_names())
    with masked_logs(secrets):  # what the parts log as they are made is masked as the service's own logs are
        sides = protocols.sides(config.protocols)
        telemetry = telemetry_for(config.telemetry, standalone=standalone, priced=bool(config.prices))
        upstream = Upstream(
            wires=sides.upstream,
            timeout=config.timeout_seconds,
            secrets=secrets,
            client=http_client,
            in_process_app=in_process_app,
            max_response_bytes=config.max_upstream_response_bytes,
            connect_timeout=config.connect_timeout_seconds,
            max_connections=config.max_upstream_connections,
            inject=telemetry.inject,
        )
        retry_policy = RetryPolicy(
            retries=config.retries,
            backoff_seconds=config.retry_backoff_seconds,
            backoff_max_seconds=config.retry_backoff_max_seconds,
            **({"sleep": sleep} if sleep is not None else {}),
        )
        admission = Admission(
            config.max_concurrent_requests,
            config.queue_timeout_seconds,
            config.max_queued_requests,
            gauge=telemetry.in_flight_gauge,
        )
        store = recording_store(config.store, store_default, secrets.values)  # configured, or `store_default`
        chat = ChatService(
            config,
            secrets=secrets,
            upstream=upstream,
            retry_policy=retry_policy,
            admission=admission,
            host_guard=host_guard or HostGuard(timeout=config.connect_timeout_seconds),
            store=store,  # started with the lifespan
            subscribers=(request_log, *subscribers, *telemetry.subscribers),
            limits=limits_for(
                config, clock=clock, on_refused=telemetry.on_rate_limited, on_error=telemetry.on_limits_error
            ),
            cache=cache_for(config, store, secrets.values, clock=clock),
            routing=_routing(config, telemetry),
            shadows=_shadows(config, telemetry, lambda: None if chat.store is None else chat.store.database.engine),
        )
        telemetry.watch(lambda: admission.in_flight, lambda: chat.store)
        return Service(
            config=config,
            chat=chat,
            secrets=secrets,
            keys=KeyRing(config.auth_api_keys_env, config.auth.keys),
            protocols=sides,
            telemetry=telemetry,
            standalone=standalone,
        )


def _routing(config: Config, telemetry: Telemetry) -> Routing | None:
    """The routers of the `auto` models (None: there are none)."""
    if not any(served.route is not None for served in config.served_models.values()):
        return None
    metrics = telemetry.metrics
    return Routing(config, on_route=None if metrics is None else metrics.count_route)


def _shadows(config: Config, telemetry: Telemetry, engine_of: Callable[[], AsyncEngine | None]) -> Shadows | None:
    """The shadows of the served models that have one (None: none has)."""
    found = {i: served.shadow for i, served in config.served_models.items() if served.shadow is not None}
    return None if not found else Shadows(found, engine_of=engine_of, metrics=telemetry.metrics)
