"""The standalone server: `uvicorn adapter_critic.asgi:app`.

The API is served under `/v1`. The config file comes from the env var `ADAPTER_CRITIC_CONFIG`; without it
the built-in demo is served.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from ._app import build_app, create_app, error_handlers
from ._auth import AuthMiddleware
from ._demo import demo_config, demo_model_app
from ._exceptions import ConfigError
from ._service import Service

CONFIG_ENV = "ADAPTER_CRITIC_CONFIG"

logger = logging.getLogger("adapter_critic")


def standalone_app() -> Starlette:
    """The app `uvicorn adapter_critic.asgi:app` serves, built from the environment."""
    path = os.environ.get(CONFIG_ENV, "").strip()
    if path:
        return _under_v1(create_app(path))
    _say(
        "adapter_critic: no config given, serving the built-in DEMO (served models demo-direct, demo-adapter, "
        "demo-critic, answered by a small deterministic demo model, not a real LLM). To serve real models, set "
        f"{CONFIG_ENV}=/path/to/config.toml (see examples/)."
    )
    return _under_v1(build_app(Service(demo_config(), in_process_app=demo_model_app())))


def _under_v1(api: Starlette) -> Starlette:
    """Serve `api` under `/v1` (SPEC §3), entering its lifespan from ours since `Mount` does not run it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with api.router.lifespan_context(api):
            yield

    service: Service = api.state.adapter_critic
    # Paths outside /v1 (404s) need the API key too, like every route but /health.
    auth = [Middleware(AuthMiddleware, auth=service.auth, public_paths=["/v1/health"])] if service.auth.enabled else []
    parent = Starlette(
        routes=[Mount("/v1", app=api)], lifespan=lifespan, exception_handlers=error_handlers("/v1"), middleware=auth
    )
    parent.state.adapter_critic = service
    return parent


def _say(message: str) -> None:
    if logger.hasHandlers():
        logger.warning(message)
    else:
        print(message, file=sys.stderr, flush=True)


try:
    app = standalone_app()
except ConfigError as exc:
    # One clear line instead of a traceback from deep inside the server's import machinery.
    raise SystemExit(f"adapter_critic: invalid config: {exc}") from None
