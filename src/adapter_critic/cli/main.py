"""The command group: `--version`, the subcommands, and how a failure is shown (one line, never a traceback)."""

from __future__ import annotations

import logging
import sys

import click

from .. import __version__
from .check import check
from .eval import eval_command
from .replay import replay
from .runs import runs
from .serve import serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="adapter-critic", message="%(prog)s %(version)s")
def cli() -> None:
    """Serve, check and evaluate adapter_critic pipelines (OpenAI-compatible chat completions)."""
    if not logging.getLogger().handlers:
        # Upstream warnings (a retry, a degraded answer) as plain lines on stderr; the per-request INFO lines
        # of an in-process run would drown the progress display.
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)


cli.add_command(serve)
cli.add_command(check)
cli.add_command(eval_command)
cli.add_command(runs)
cli.add_command(replay)


def main() -> None:
    """The console script `adapter-critic`."""
    cli(prog_name="adapter-critic")
