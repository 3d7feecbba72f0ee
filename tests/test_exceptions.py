"""Every exception class the package defines derives from `AdapterCriticError` and sits in the tree drawn at the top
of `adapter_critic/errors.py`, under the parent it really has, with the builtin bases the tree says it keeps."""

from __future__ import annotations

import importlib
import pkgutil
import re

import click

import adapter_critic
from adapter_critic import errors
from adapter_critic.errors import AdapterCriticError

_ALSO = re.compile(r"\(also an? ([\w.]+)\)")
_KEPT_BASES = {"ValueError": ValueError, "RuntimeError": RuntimeError, "click.ClickException": click.ClickException}


def package_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in any of the package's modules (nested ones too)."""
    for module in pkgutil.walk_packages(adapter_critic.__path__, "adapter_critic."):
        if module.name.rpartition(".")[2] != "__main__":  # importing one runs the command line
            importlib.import_module(module.name)
    found: set[type[BaseException]] = set()
    pending: list[type[BaseException]] = [BaseException]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                pending.append(sub)
    return {cls for cls in found if in_package(cls)}


def drawn_tree() -> dict[str, tuple[str | None, str]]:
    """The tree in errors.py's docstring: each name's parent (None for the root) and the rest of its line."""
    assert errors.__doc__ is not None
    paragraphs = [p for p in errors.__doc__.split("\n\n") if not p.startswith("Internal:")]  # its internal note
    lines = paragraphs[1].splitlines()
    assert lines[0] == "AdapterCriticError"
    tree: dict[str, tuple[str | None, str]] = {"AdapterCriticError": (None, "")}
    parents = ["AdapterCriticError"]  # the line's ancestors, by depth
    for line in lines[1:]:
        drawn = re.fullmatch(r"((?:[│ ]   )*)[├└]── (\w+)(.*)", line)
        assert drawn is not None, line
        depth = len(drawn[1]) // 4 + 1
        name = drawn[2]
        assert name not in tree, f"{name} is drawn twice"
        tree[name] = (parents[depth - 1], drawn[3])
        parents[depth:] = [name]
    return tree


def in_package(cls: type) -> bool:
    return cls.__module__.partition(".")[0] == "adapter_critic"


def package_parent(cls: type[BaseException]) -> str | None:
    """The name of the nearest base of `cls` that the package defines."""
    return next((base.__name__ for base in cls.__mro__[1:] if in_package(base)), None)


def dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_every_package_exception_derives_from_the_base() -> None:
    outside = sorted(dotted(cls) for cls in package_exceptions() if not issubclass(cls, AdapterCriticError))
    assert outside == []


def test_every_package_exception_is_in_the_tree_under_its_parent() -> None:
    tree = drawn_tree()
    classes = package_exceptions()
    assert sorted(tree) == sorted(cls.__name__ for cls in classes)  # none missing, none stale
    for cls in classes:
        if cls is AdapterCriticError:
            continue
        parent, rest = tree[cls.__name__]
        assert package_parent(cls) == parent, dotted(cls)
        # A builtin (or click) base that callers caught is kept, and the tree says so.
        also = {_KEPT_BASES[name] for name in _ALSO.findall(rest)}
        assert {base for base in cls.__bases__ if not in_package(base)} - {Exception} == also, dotted(cls)
        defined_in = cls.__module__.removeprefix("adapter_critic.")
        assert cls.__module__ == "adapter_critic.errors" or rest.split()[1].rstrip(":,") == defined_in, rest


def test_errors_that_callers_caught_as_builtins_still_are() -> None:
    from adapter_critic.store.database import StoreURLError
    from adapter_critic.store.records import BadCursor
    from adapter_critic.store.schema import SchemaTooNew
    from adapter_critic.workflows.edits import EditError

    assert issubclass(StoreURLError, ValueError) and issubclass(BadCursor, ValueError)
    assert issubclass(EditError, ValueError) and issubclass(SchemaTooNew, RuntimeError)
