"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Loading plug-ins: the classes an entry-point group names, built-in ones first, then the installed plug-ins by name
— one instance of each. A broken plug-in is logged and left out; it never takes the server down.

The built-in ones are registered in one place, the entry points of adapter_critic's own pyproject.toml: they are
read from the installed package's metadata or, in a source tree that was never installed (no metadata), from that
pyproject.toml itself (`source_tree_entry_points`).
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger("adapter_critic")

DISTRIBUTION = "adapter_critic"
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # src/adapter_critic/plugins.py -> the tree's root

T = TypeVar("T")


def load_plugins(group: str, base: type[T], what: str, listed_first: Sequence[str] = ()) -> dict[str, T]:
    """An instance of every `base` subclass registered in the entry-point `group`, by name: adapter_critic's own
    (in the order `listed_first` gives, then by name), then the installed plug-ins by name. A plug-in class's `name`
    must be its entry point's. `what` names them in the log."""
    found: dict[str, T] = {}
    built_in = built_in_entry_points(group)
    rank = {name: index for index, name in enumerate(listed_first)}
    for name in sorted(built_in, key=lambda n: (rank.get(n, len(rank)), n)):
        module, _, attribute = built_in[name].partition(":")
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


def built_in_entry_points(group: str) -> dict[str, str]:
    """adapter_critic's own entry points of `group` (`name -> "module:Class"`): from the installed package's metadata,
    or from the source tree's pyproject.toml when the package was never installed."""
    try:
        own = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return source_tree_entry_points(group)
    return {entry.name: entry.value for entry in own.entry_points.select(group=group)}


def source_tree_entry_points(group: str, pyproject: Path = _PYPROJECT) -> dict[str, str]:
    """The entry points of `group` that adapter_critic's pyproject.toml registers (empty without that file)."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except OSError:
        return {}
    if project.get("name") != DISTRIBUTION:
        return {}
    return dict(project.get("entry-points", {}).get(group, {}))
