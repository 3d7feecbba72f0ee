"""`python -m adapter_critic.cli`: the `adapter-critic` command."""

from __future__ import annotations

from .main import main

main()
