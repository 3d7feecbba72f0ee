"""adapter_critic: an OpenAI-compatible chat-completions server that runs each request through a workflow of
upstream model calls (direct, adapter, critic, or any registered plug-in)."""

from __future__ import annotations

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
from .version import __version__
from .workflows.base import RunContext, StageCall, StageFailed, Workflow

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
