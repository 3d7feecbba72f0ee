"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `adapter-critic` command line (the `[cli]` extra, also in `[server]`): `serve`, `check`, `eval`, one module per
subcommand.

`main` is the console script's entry point. Every failure a user can cause (a missing file, a bad config, a bad
dataset line, an unknown model, an unreachable server) ends with one `Error: ...` line and a non-zero exit — also a
command line installed without its extra's packages: `--version` still answers, anything else says what to install.
"""

from __future__ import annotations

import sys
from typing import Any

from ..version import __version__

__all__ = ["cli", "main"]


def main() -> None:
    """The console script `adapter-critic`."""
    try:
        from .main import main as run
    except ImportError as exc:
        if sys.argv[1:] in (["--version"], ["-V"]):
            print(f"adapter-critic {__version__}")
            sys.exit(0)
        print(
            f"Error: the adapter-critic command line needs the `cli` extra ({exc.name or 'a package'} is not "
            "installed): pip install 'adapter_critic[cli]'",
            file=sys.stderr,
        )
        sys.exit(1)
    run()


def __getattr__(name: str) -> Any:
    """`cli`, the click command group, imported when asked for (it needs the `cli` extra's packages)."""
    if name == "cli":
        from .main import cli

        return cli
    raise AttributeError(name)
