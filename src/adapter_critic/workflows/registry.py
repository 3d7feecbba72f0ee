"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The registered workflows: every entry point of the group `adapter_critic.workflows`, by mode name.

Each entry point names a `Workflow` subclass (`direct = "adapter_critic.workflows.direct:Direct"`). They are
loaded once, on first use. The built-in modes are the entry points of adapter_critic's own pyproject.toml, also in
a source tree that was never installed (`plugins.built_in_entry_points`).
"""

from __future__ import annotations

import functools

import msgspec
import msgspec.inspect

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


@functools.cache
def limitable() -> dict[str, str]:
    """Every setting a request may choose that a served model's `request_limits` may cap, and what is capped:
    `"value"` (a number) or `"items"` (a list), as the workflows' `RequestSettings` type them."""
    found: dict[str, str] = {}
    for workflow in workflows().values():
        for field in msgspec.structs.fields(workflow.RequestSettings):
            kind = _capped(msgspec.inspect.type_info(field.type))
            if kind is not None:
                found.setdefault(field.name, kind)
    return found


def _capped(info: msgspec.inspect.Type) -> str | None:
    if isinstance(info, msgspec.inspect.Metadata):
        return _capped(info.type)
    if isinstance(info, msgspec.inspect.UnionType):
        kinds = {_capped(member) for member in info.types if not isinstance(member, msgspec.inspect.NoneType)}
        return kinds.pop() if len(kinds) == 1 else None
    if isinstance(info, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        return "value"
    if isinstance(info, msgspec.inspect.ListType):
        return "items"
    return None


@functools.cache
def prefixes() -> dict[str, str]:
    """The mode each model-name prefix names (`critic`, `moa` → `mixture_of_agents`): every mode's name, then the
    aliases its workflow declares (a name wins over another workflow's alias)."""
    found = {name: name for name in workflows()}
    for name, workflow in workflows().items():
        for alias in workflow.aliases:
            found.setdefault(alias, name)
    return found
