"""adapter_critic: an OpenAI-compatible chat-completions server that runs each request through a workflow of
upstream model calls (direct, adapter, critic, or any registered plug-in).

The public API is what these modules list in `__all__`, and nothing else:

- `adapter_critic`: the app (`create_app`), the middleware, the config, the exceptions, and what a workflow
  plug-in is written with;
- `adapter_critic.config`: the config and loading it;
- `adapter_critic.store`: reading a run store (`open_store`) and the shapes of its records;
- `adapter_critic.workflows.base` and `adapter_critic.protocols.base`: the base classes of workflow and protocol
  plug-ins;
- `adapter_critic.observe.logs`: `JsonFormatter`, for a logging config;
- `adapter_critic.asgi`: `app`, the standalone server (`uvicorn adapter_critic.asgi:app`).

Every other module is internal, and its docstring starts with `Internal:`: it may change in any release, whatever
its names look like. The `adapter-critic` command is the command line's interface; its modules are internal too.
tests/test_exported_members.py holds the public names and checks both rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

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
from .version import __version__
from .workflows.base import PerRequest, RunContext, StageCall, StageFailed, Workflow

if _TYPE_CHECKING:
    from .http.create import create_app
    from .http.middleware import AdapterCriticMiddleware

# The app and the middleware bring the HTTP layer, the service and every upstream client with them: imported when
# first used, so that a process that needs neither (`adapter-critic --version`, `runs`, a plug-in's module) does not
# pay for them (PEP 562).
_LAZY = {"create_app": ".http.create", "AdapterCriticMiddleware": ".http.middleware"}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    found = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = found
    return found


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
    "PerRequest",
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
