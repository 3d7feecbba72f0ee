"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The command group: `--version`, the subcommands, and how a failure is shown (one line, never a traceback)."""

from __future__ import annotations

import logging
import sys

import click

from ..version import __version__
from .check import check
from .eval import eval_command
from .keys import keys
from .lessons import lessons
from .replay import replay
from .runs import runs
from .serve import serve
from .tune import tune


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


cli.add_command(serve)
cli.add_command(check)
cli.add_command(eval_command)
cli.add_command(tune)
cli.add_command(runs)
cli.add_command(replay)
cli.add_command(keys)
cli.add_command(lessons)


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
