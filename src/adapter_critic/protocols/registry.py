"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The registered protocols: every entry point of the group `adapter_critic.protocols`, by name, and their
sides for a config's `[protocols.<name>]` settings.

Each entry point names a `Protocol` subclass (`openai = "adapter_critic.protocols.openai:OpenAI"`). They are
loaded once, on first use. The built-in ones are the entry points of adapter_critic's own pyproject.toml, also in a
source tree that was never installed (`plugins.built_in_entry_points`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..plugins import load_plugins
from .base import Inbound, Protocol, UpstreamWire

GROUP = "adapter_critic.protocols"
DEFAULT = "openai"
# The order the built-in protocols are listed in (`names()`, messages): entry-point metadata lists them by name.
# Which protocols are built in is pyproject.toml's to say.
LISTED_FIRST = ("openai", "anthropic", "responses")


@functools.cache
def protocols() -> dict[str, Protocol]:
    """Every registered protocol by name: the built-in ones first, then the plug-ins by name."""
    return load_plugins(GROUP, Protocol, "protocol", LISTED_FIRST)


def names() -> tuple[str, ...]:
    return tuple(protocols())


def upstream_names() -> tuple[str, ...]:
    """The protocols a stage target may name (those with an upstream side)."""
    return tuple(name for name, p in protocols().items() if p.upstream(p.Settings()) is not None)


def settings_of(name: str, given: Mapping[str, Any] | None) -> msgspec.Struct:
    """The protocol's `Settings` from its config table (already validated at load), or its defaults."""
    kind = protocols()[name].Settings
    return msgspec.convert(dict(given or {}), kind) if given else kind()


@dataclass(frozen=True, slots=True)
class Sides:
    """The protocols' sides for one config: inbound routes by path, upstream wires by protocol name."""

    inbound: Mapping[str, Inbound]
    upstream: Mapping[str, UpstreamWire]

    def wire(self, name: str) -> UpstreamWire:
        return self.upstream[name]


def sides(settings: Mapping[str, Mapping[str, Any]] | None = None) -> Sides:
    """Every registered protocol's sides for the config's `[protocols.<name>]` tables (`settings`)."""
    inbound: dict[str, Inbound] = {}
    upstream: dict[str, UpstreamWire] = {}
    for name, protocol in protocols().items():
        chosen = settings_of(name, (settings or {}).get(name))
        side = protocol.inbound(chosen)
        if side is not None:
            inbound.setdefault(side.path, side)
        wire = protocol.upstream(chosen)
        if wire is not None:
            upstream[name] = wire
    return Sides(inbound, upstream)
