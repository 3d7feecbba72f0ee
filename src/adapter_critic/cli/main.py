"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The command group: `--version`, the subcommands, and how a failure is shown (one line, never a traceback)."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from ..version import __version__

# Each subcommand's module and command, imported when that subcommand runs (or help lists them): `runs` never loads
# the HTTP app, `--version` loads nothing (Click's documented lazy group: `get_command` and `list_commands`).
SUBCOMMANDS = {
    "serve": "serve:serve",
    "check": "check:check",
    "eval": "eval:eval_command",
    "tune": "tune:tune",
    "runs": "runs:runs",
    "replay": "replay:replay",
    "keys": "keys:keys",
    "lessons": "lessons:lessons",
    "route": "route:route",
    "shadow": "shadow:shadow",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *SUBCOMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = SUBCOMMANDS.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        module, _, name = where.partition(":")
        command = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="adapter-critic", message="%(prog)s %(version)s")
@click.pass_context
def cli(context: click.Context) -> None:
    """Serve, check, evaluate and compare adapter_critic pipelines (OpenAI-compatible chat completions)."""
    if context.invoked_subcommand == "serve":
        # The server logs as `uvicorn adapter_critic.asgi:app` does: uvicorn's handlers, and the app's own
        # (`observe/logs.configure_standalone_logging`), which steps aside when the root logger has a handler.
        return
    if not logging.getLogger().handlers:
        # Upstream warnings (a retry, a degraded answer) as plain lines on stderr; the per-request INFO lines
        # of an in-process run would drown the progress display.
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)


def main() -> None:
    """The console script `adapter-critic`: every failure is one `Error: ...` line on stderr and a non-zero exit."""
    try:
        code = cli.main(prog_name="adapter-critic", standalone_mode=False)
    except click.UsageError as exc:  # a wrong option: one line and where to look, not the whole usage text
        command = exc.ctx.command_path if exc.ctx is not None else "adapter-critic"
        click.echo(f"Error: {exc.format_message()} (see {command} --help)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:  # Ctrl-C outside a run that handles it itself
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
