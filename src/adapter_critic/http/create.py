"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`create_app` (public as `adapter_critic.create_app`) and the standalone server's app: a config in, its service
composed (`service.compose`) and the Starlette app built around it (`http.app.build_app`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
from starlette.applications import Starlette

from ..config import Config, load_config, require_absolute_urls
from ..demo import DEMO_BASE_URL, demo_model_for
from ..service.compose import compose
from ..store.settings import default_url
from ..upstream.pinning import HostGuard, Resolver
from ..upstream.retry import Sleep
from .app import build_app


def create_app(
    config: Config | str | Path,
    *,
    http_client: httpx.AsyncClient | None = None,
    sleep: Sleep | None = None,
    resolver: Resolver | None = None,
    clock: Callable[[], float] | None = None,
) -> Starlette:
    """Build the adapter_critic ASGI app.

    Parameters:
        config: a `Config`, or the path of a `.toml`/`.json`/`.yaml` config file.
        http_client: an `httpx.AsyncClient` to use for upstream calls instead of the app's own
            (it is not closed by the app). Calls to override URLs that only `allowed_override_base_urls = ["*"]`
            allows still go through the app's own client, which connects to the addresses it checked.
        sleep: the async function that waits between retries (default `anyio.sleep`; tests pass one that
            records the waits instead).
        resolver: the async function `(host, port) -> addresses` that resolves such override URLs' host names
            (default: the system's resolver; tests pass one that answers without the network).
        clock: what tells the limits' windows the time, in Unix seconds (default `time.time`; tests pass one they
            move).

    Every `base_url` must be absolute; relative ones only work with `AdapterCriticMiddleware`.
    """
    config = _absolute(config)
    guard = HostGuard(resolver, timeout=config.connect_timeout_seconds) if resolver is not None else None
    return build_app(compose(config, http_client=http_client, sleep=sleep, host_guard=guard, clock=clock or time.time))


def create_standalone_app(config: Config | str | Path, *, on_started: Callable[[], None] | None = None) -> Starlette:
    """`create_app` with its routes under `/v1` and the standalone server's defaults, as
    `uvicorn adapter_critic.asgi:app` serves them. A target may name the built-in demo model (`/demo/v1`), which the
    server then answers in-process."""
    if not isinstance(config, Config):
        config = load_config(config)
    demo = demo_model_for(config)
    config = _absolute(config, served_here=(DEMO_BASE_URL,) if demo is not None else ())
    service = compose(config, standalone=True, in_process_app=demo, store_default=default_url())
    return build_app(service, prefix="/v1", on_started=on_started)


def _absolute(config: Config | str | Path, *, served_here: tuple[str, ...] = ()) -> Config:
    """The config (loaded from its file if a path), refused if a `base_url` is relative (but those `served_here`)."""
    if not isinstance(config, Config):
        config = load_config(config)
    require_absolute_urls(config, served_here=served_here)
    return config
