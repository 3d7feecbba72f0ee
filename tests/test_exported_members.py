"""The declared public surface: the modules `adapter_critic`'s docstring lists export exactly the names documented
here, each of which exists; every public-looking name of the package's `__init__` is exported; and every other
module says it is internal (its docstring starts with `Internal:`)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import adapter_critic

PUBLIC: dict[str, set[str]] = {
    "adapter_critic": {
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
    },
    "adapter_critic.asgi": {"app"},
    "adapter_critic.config": {
        "DEFAULT_MAX_BODY_BYTES",
        "DEFAULT_MAX_MESSAGES",
        "DEFAULT_MAX_UPSTREAM_CONNECTIONS",
        "DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES",
        "Config",
        "ServedModel",
        "Target",
        "is_relative",
        "load_config",
        "normalize_url",
        "require_absolute_urls",
        "source_of",
    },
    "adapter_critic.store": {
        "BadCursor",
        "RunCost",
        "RunDetail",
        "RunPage",
        "RunQuery",
        "RunStore",
        "RunSummary",
        "StageCost",
        "StoredAnswer",
        "StoredAttempt",
        "StoredError",
        "StoredRequest",
        "StoredStage",
        "open_store",
    },
    "adapter_critic.workflows.base": {"NoSettings", "PerRequest", "RunContext", "StageCall", "StageFailed", "Workflow"},
    "adapter_critic.protocols.base": {
        "Inbound",
        "NoSettings",
        "Protocol",
        "Redact",
        "StreamRenderer",
        "UpstreamWire",
    },
    "adapter_critic.observe.logs": {"JsonFormatter"},
}

PACKAGE = Path(adapter_critic.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_module_exports_exactly_the_documented_names(module: str) -> None:
    exported = importlib.import_module(module).__all__
    assert len(exported) == len(set(exported))
    assert set(exported) == PUBLIC[module]
    for name in exported:
        assert hasattr(importlib.import_module(module), name), name


def test_every_public_looking_name_of_the_package_is_exported() -> None:
    public_looking = {
        name
        for name, value in vars(adapter_critic).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and type(value).__module__ != "__future__"  # `from __future__ import annotations` leaves `annotations`
    }
    assert public_looking == set(adapter_critic.__all__) - {"__version__"}


def test_the_package_docstring_names_every_public_module() -> None:
    assert adapter_critic.__doc__ is not None
    for module in PUBLIC:
        assert f"`{module}`" in adapter_critic.__doc__


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: _module_name(p))
def test_every_other_module_says_it_is_internal(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text("utf-8")))
    assert docstring is not None
    assert docstring.startswith("Internal:") is (_module_name(path) not in PUBLIC)
