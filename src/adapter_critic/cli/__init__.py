"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `adapter-critic` command line (the `[cli]` extra): `serve`, `check`, `eval`, one module per subcommand.

`main` is the console script's entry point. Every failure a user can cause (a missing file, a bad config, a bad
dataset line, an unknown model, an unreachable server) ends with one `Error: ...` line and a non-zero exit.
"""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]
