"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic serve`: the standalone server, exactly what `uvicorn adapter_critic.asgi:app` runs."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import click

from .errors import CliError
from .options import CONFIG_ENV, config_option, load_served


@click.command()
@config_option
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="port to listen on")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1), help="worker processes")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug", "trace"]),
    help="uvicorn's log level (warning drops the per-request lines)",
)
@click.option("--fd", type=int, default=None, help="serve on this already open socket (as uvicorn's --fd)")
def serve(config_path: str | None, host: str, port: int, workers: int, log_level: str, fd: int | None) -> None:
    """Serve the API under /v1 with uvicorn (the same app as `uvicorn adapter_critic.asgi:app`)."""
    config = load_served(config_path).config  # a bad config is one line here, before any worker starts
    limited = any(k.limits.any for k in config.auth.keys) or any(s.limits.any for s in config.served_models.values())
    if workers > 1 and limited and config.limits.url is None:
        click.echo(
            f"Warning: the limits are counted in each of the {workers} worker processes on its own (each admits up "
            "to the whole limit); set [limits] url to a Redis to enforce one limit (docs/guides/limits.md).",
            err=True,
        )
    try:
        import uvicorn
    except ImportError:
        raise CliError("serve needs uvicorn: pip install 'adapter_critic[server]'") from None
    if fd is None:
        require_free(host, port)
    if config_path:
        # The app reads its config from the environment, in this process and in every worker.
        os.environ[CONFIG_ENV] = str(Path(config_path).resolve())
    uvicorn.run(
        "adapter_critic.asgi:app",
        host=host,
        port=port,
        fd=fd,
        workers=workers,
        log_level=log_level,
    )


def require_free(host: str, port: int) -> None:
    """A port already in use (or an address this machine cannot listen on) is one line here, before any app is
    built, rather than uvicorn's error after the app's start-up. Bound as uvicorn binds it, then let go."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliError(f"{where} is already in use (another server?); choose another --port") from None
            raise CliError(f"cannot listen on {where}: {exc.strerror or exc}") from None
