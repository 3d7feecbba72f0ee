"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`python -m adapter_critic.cli`: the `adapter-critic` command."""

from __future__ import annotations

from .main import main

main()
