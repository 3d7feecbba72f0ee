"""Loading plug-ins: the classes an entry-point group names, built-in ones first (also in a source tree that was
never installed), then the installed plug-ins by name — one instance of each. A broken plug-in is logged and left
out; it never takes the server down."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import TypeVar

logger = logging.getLogger("adapter_critic")

T = TypeVar("T")


def load_plugins(group: str, built_in: Mapping[str, str], base: type[T], what: str) -> dict[str, T]:
    """An instance of every `base` subclass named in `built_in` (`name -> "module:Class"`) and in the entry-point
    `group`, by name; a plug-in class's `name` must be its entry point's. `what` names them in the log."""
    found: dict[str, T] = {}
    for name, reference in built_in.items():
        module, _, attribute = reference.partition(":")
        found[name] = getattr(import_module(module), attribute)()
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        if entry.name in built_in:
            continue
        try:
            kind = entry.load()
        except Exception:  # a broken plug-in must not take the server down with it
            logger.exception("%s plug-in %r (%s) could not be loaded; it is not served", what, entry.name, entry.value)
            continue
        if not (isinstance(kind, type) and issubclass(kind, base)) or getattr(kind, "name", None) != entry.name:
            logger.error(
                "%s plug-in %r (%s) is not a %s subclass whose `name` is %r; it is not served",
                *(what, entry.name, entry.value, base.__name__, entry.name),
            )
            continue
        found[entry.name] = kind()
    return found
