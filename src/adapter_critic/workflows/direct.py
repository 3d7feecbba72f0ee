"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`direct`: one API call, its answer returned as the upstream gave it (docs/guides/workflows.md)."""

from __future__ import annotations

from ..core import FinalCall
from .base import RunContext, Workflow


class Direct(Workflow):
    name = "direct"
    stages = ("api",)
    final_key = "api"
    many_choices = True  # every choice the upstream gives is relayed

    async def run(self, run: RunContext) -> FinalCall:
        return run.final("api", run.request.messages_json, first=True)
