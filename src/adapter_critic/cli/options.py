"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What several subcommands share: the `--config` option and loading the config it names (or the built-in demo)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from starlette.types import ASGIApp

from ..config import Config, ServedModel, load_config, require_absolute_urls
from ..demo import DEMO_BASE_URL, demo_config, demo_model_app, demo_model_for
from ..errors import ConfigError
from .errors import CliError

if TYPE_CHECKING:
    from ..evals.endpoint import Endpoint

# The env var the standalone server reads (not imported from `asgi`, which builds its app on import).
CONFIG_ENV = "ADAPTER_CRITIC_CONFIG"

_F = TypeVar("_F", bound=Callable[..., Any])


def config_option(function: _F) -> _F:
    """`--config FILE` (default: `$ADAPTER_CRITIC_CONFIG`, else the built-in demo)."""
    option = click.option(
        "--config",
        "-c",
        "config_path",
        envvar=CONFIG_ENV,
        metavar="FILE",
        help=f"config file (.toml, .json, .yaml); default ${CONFIG_ENV}, else the built-in demo",
    )
    return option(function)


@dataclass(frozen=True)
class Served:
    """A loaded config, the app serving its relative `base_url`s in-process (the demo model), and its name."""

    config: Config
    in_process_app: ASGIApp | None
    name: str


def load_served(config_path: str | None) -> Served:
    """The config at `config_path`, checked as the standalone server checks it; the demo when None."""
    if not config_path:
        return Served(demo_config(), demo_model_app(), "the built-in demo")
    if not Path(config_path).is_file():
        raise CliError(f"{config_path}: no such config file")
    try:
        config = load_config(config_path)
        demo = demo_model_for(config)  # a config may name the demo model, as the one `tune` writes over it does
        require_absolute_urls(config, served_here=(DEMO_BASE_URL,) if demo is not None else ())
    except ConfigError as exc:
        raise CliError(f"invalid config: {exc}") from None
    return Served(config, demo, config_path)


def served_model(served: Served, model: str, said: str = "") -> ServedModel:
    """The served model `model` of the loaded config, or one line listing those it has (`said`: how the command
    line named it, e.g. `--model `)."""
    found = served.config.served_models.get(model)
    if found is None:
        names = ", ".join(served.config.served_models)
        raise CliError(f"{said}{model!r} is no served model of {served.name}: {names}")
    return found


def require_file(path: str, what: str) -> Path:
    """`path` as a readable file, or one line saying why not."""
    found = Path(path)
    if not found.is_file():
        raise CliError(f"{path}: no such {what}" if not found.exists() else f"{path}: not a file")
    return found


def endpoint_options(function: _F) -> _F:
    """`--config`, `--base-url`, `--api-key-env`: where chat requests go (in-process by default)."""
    for option in (
        click.option("--api-key-env", metavar="VAR", help="with --base-url: the env var holding its API key"),
        click.option("--base-url", metavar="URL", help="a running OpenAI-compatible server (…/v1), not in-process"),
    ):
        function = option(function)
    return config_option(function)


def open_endpoint(
    config_path: str | None, base_url: str | None, api_key_env: str | None, *, seconds: float, retries: int
) -> contextlib.AbstractAsyncContextManager[Endpoint]:
    """The app in-process (the config, else the demo) or the server at `base_url`; not both."""
    from ..evals import endpoint as endpoints  # the service and its upstream client: only a command that asks

    if base_url and config_path:
        raise CliError("give --config (run in-process) or --base-url (a running server), not both")
    if base_url:
        return endpoints.remote(base_url, api_key_env, seconds, retries)
    served = load_served(config_path)
    return endpoints.in_process(served.config, served.in_process_app, seconds, served.name)
