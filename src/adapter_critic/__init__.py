"""adapter_critic: an OpenAI-compatible chat-completions server that runs each request through a workflow of
upstream model calls (direct, adapter, critic, or any registered plug-in)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .config import Config, ServedModel, Target, load_config
from .core import Answer, ChatRequest, Completion, FinalCall, Plan, StageTarget, Usage
from .errors import (
    AdapterCriticError,
    APIError,
    AuthenticationError,
    ConfigError,
    Overloaded,
    RequestError,
    ServerError,
    UpstreamError,
)
from .http.app import create_app
from .http.middleware import AdapterCriticMiddleware
from .workflows.base import RunContext, StageCall, StageFailed, Workflow

try:
    __version__ = version("adapter_critic")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "APIError",
    "AdapterCriticError",
    "AdapterCriticMiddleware",
    "Answer",
    "AuthenticationError",
    "ChatRequest",
    "Completion",
    "Config",
    "ConfigError",
    "FinalCall",
    "Overloaded",
    "Plan",
    "RequestError",
    "RunContext",
    "ServedModel",
    "ServerError",
    "StageCall",
    "StageFailed",
    "StageTarget",
    "Target",
    "UpstreamError",
    "Usage",
    "Workflow",
    "__version__",
    "create_app",
    "load_config",
]
