"""The registered workflows: every entry point of the group `adapter_critic.workflows`, by mode name.

Each entry point names a `Workflow` subclass (`direct = "adapter_critic.workflows.direct:Direct"`). They are
loaded once, on first use. The built-in modes are always there, also in a source tree that was never
installed (no entry-point metadata).
"""

from __future__ import annotations

import functools

from ..plugins import load_plugins
from .base import Workflow

GROUP = "adapter_critic.workflows"
BUILT_IN = {
    "direct": "adapter_critic.workflows.direct:Direct",
    "adapter": "adapter_critic.workflows.adapter:Adapter",
    "critic": "adapter_critic.workflows.critic:Critic",
    "advisor": "adapter_critic.workflows.advisor:Advisor",
    "panel": "adapter_critic.workflows.panel:Panel",
    "best_of_n": "adapter_critic.workflows.best_of_n:BestOfN",
}


@functools.cache
def workflows() -> dict[str, Workflow]:
    """Every registered workflow by its mode name: the built-in ones first, then the plug-ins by name."""
    return load_plugins(GROUP, BUILT_IN, Workflow, "workflow")


def get(mode: str) -> Workflow:
    """The workflow registered as `mode`; KeyError if none is."""
    return workflows()[mode]


def names() -> tuple[str, ...]:
    return tuple(workflows())


def target_keys() -> tuple[str, ...]:
    """Every served-model key that names a stage target, in registration order (the credential binding order)."""
    keys: dict[str, None] = {}
    for workflow in workflows().values():
        keys.update(dict.fromkeys(workflow.targets))
    return tuple(keys)
