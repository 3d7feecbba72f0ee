"""adapter_critic: an OpenAI-compatible chat-completions server that runs each request through a
direct, adapter or critic workflow of upstream model calls."""

from __future__ import annotations

from ._app import create_app
from ._config import Config, ServedModel, Target, load_config
from ._exceptions import (
    AdapterCriticError,
    APIError,
    ConfigError,
    RequestError,
    ServerError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ._middleware import AdapterCriticMiddleware

__all__ = [
    "APIError",
    "AdapterCriticError",
    "AdapterCriticMiddleware",
    "Config",
    "ConfigError",
    "RequestError",
    "ServedModel",
    "ServerError",
    "Target",
    "UpstreamError",
    "UpstreamStatusError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "create_app",
    "load_config",
]
