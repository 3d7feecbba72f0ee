"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The registered workflows: every entry point of the group `adapter_critic.workflows`, by mode name.

Each entry point names a `Workflow` subclass (`direct = "adapter_critic.workflows.direct:Direct"`). They are
loaded once, on first use. The built-in modes are the entry points of adapter_critic's own pyproject.toml, also in
a source tree that was never installed (`plugins.built_in_entry_points`).
"""

from __future__ import annotations

import functools

from ..plugins import load_plugins
from .base import Workflow

GROUP = "adapter_critic.workflows"
# The order the built-in modes are listed in (`names()`, messages) and their target keys bound in (`Config.targets`,
# docs/guides/security.md), simplest first: entry-point metadata lists them by name. Which modes are built in is
# pyproject.toml's to say.
LISTED_FIRST = (
    "direct",
    "adapter",
    "critic",
    "advisor",
    "panel",
    "best_of_n",
    "self_consistency",
    "self_refine",
    "re2",
    "mixture_of_agents",
    "chain_of_verification",
)


@functools.cache
def workflows() -> dict[str, Workflow]:
    """Every registered workflow by its mode name: the built-in ones first, then the plug-ins by name."""
    return load_plugins(GROUP, Workflow, "workflow", LISTED_FIRST)


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
