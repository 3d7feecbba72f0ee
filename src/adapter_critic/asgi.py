"""The standalone server: `uvicorn adapter_critic.asgi:app`.

The API is served under `/v1`. The config file comes from the env var `ADAPTER_CRITIC_CONFIG`; without it
the built-in demo is served. Its connections get `TCP_NODELAY` however the server made its sockets
(`http.nodelay`).
"""

from __future__ import annotations

import logging
import os
import sys

from starlette.applications import Starlette

from .demo import demo_config, demo_model_app
from .errors import ConfigError
from .http import nodelay
from .http.app import build_app, create_standalone_app
from .http.chat import Service
from .observe.logs import configure_standalone_logging
from .observe.workers import prepare_multiprocess_dir
from .store.settings import default_url

CONFIG_ENV = "ADAPTER_CRITIC_CONFIG"

logger = logging.getLogger("adapter_critic")


def standalone_app() -> Starlette:
    """The app `uvicorn adapter_critic.asgi:app` serves, built from the environment, under `/v1`
    (docs/reference/http.md)."""
    configure_standalone_logging()
    prepare_multiprocess_dir()  # `--workers N`: metrics summed over the workers
    nodelay.install()
    path = os.environ.get(CONFIG_ENV, "").strip()
    if path:
        return create_standalone_app(path)
    _say(
        "adapter_critic: no config given, serving the built-in DEMO (served models demo-direct, demo-adapter, "
        "demo-critic, demo-advisor, demo-panel, demo-best-of-3, answered by a small deterministic demo model, not a "
        "real LLM). To serve real models, set "
        f"{CONFIG_ENV}=/path/to/config.toml (see examples/)."
    )
    service = Service(demo_config(), in_process_app=demo_model_app(), store_default=default_url())
    return build_app(service, prefix="/v1", standalone=True)


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
