"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Rich consoles: tables on stdout, progress and notices on stderr; wide when not a terminal, so a table written
to a file or a pipe is not wrapped."""

from __future__ import annotations

import sys

from rich.console import Console


def stdout() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200)


def stderr() -> Console:
    return Console(stderr=True, width=None if sys.stderr.isatty() else 200)
