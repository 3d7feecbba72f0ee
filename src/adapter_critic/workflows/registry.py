"""The registered workflows: every entry point of the group `adapter_critic.workflows`, by mode name.

Each entry point names a `Workflow` subclass (`direct = "adapter_critic.workflows.direct:Direct"`). They are
loaded once, on first use. The built-in modes are always there, also in a source tree that was never
installed (no entry-point metadata).
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import entry_points

from .base import Workflow

logger = logging.getLogger("adapter_critic")

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
    from importlib import import_module

    found: dict[str, Workflow] = {}
    for name, reference in BUILT_IN.items():
        module, _, attribute = reference.partition(":")
        found[name] = getattr(import_module(module), attribute)()
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if entry.name in BUILT_IN:
            continue
        try:
            kind = entry.load()
        except Exception:  # a broken plug-in must not take the server down with it
            logger.exception("workflow plug-in %r (%s) could not be loaded; it is not served", entry.name, entry.value)
            continue
        if not (isinstance(kind, type) and issubclass(kind, Workflow)) or getattr(kind, "name", None) != entry.name:
            logger.error(
                "workflow plug-in %r (%s) is not a Workflow subclass whose `name` is %r; it is not served",
                *(entry.name, entry.value, entry.name),
            )
            continue
        found[entry.name] = kind()
    return found


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
