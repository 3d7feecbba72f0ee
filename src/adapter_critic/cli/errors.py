"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The command line's one kind of failure: a message a user can act on, printed as one line, exit status 1."""

from __future__ import annotations

import click

from ..errors import AdapterCriticError


class CliError(click.ClickException, AdapterCriticError):
    """A failure the user can fix (a file, a flag, a server); Click prints `Error: <message>` and exits 1."""


class Interrupted(click.ClickException, AdapterCriticError):
    """Ctrl-C: what was done is kept; exit status 130 as a shell reports an interrupted command."""

    exit_code = 130
