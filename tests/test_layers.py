"""The package is layered: no subpackage imports one that imports it back, directly or through others.

The graph is read from the source with `ast`, at the level of subpackages (`http`, `protocols`, …) and top-level
modules (`errors`, `core`, …, and `adapter_critic` for the package's own `__init__`). Every import counts: those
inside functions and under `TYPE_CHECKING` too, since a layer that needs another's code in a function, or its
types for a checker, still depends on it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import adapter_critic

PACKAGE = Path(adapter_critic.__file__).parent
ROOT = "adapter_critic"

# node -> imported node -> where ("http/app.py:31")
Graph = Mapping[str, Mapping[str, list[str]]]


def _node(module: list[str]) -> str:
    """The layer a module (its path below the package, as parts) belongs to."""
    if not module or module == ["__init__"]:
        return ROOT
    return module[0]


def _is_module(parts: list[str]) -> bool:
    path = PACKAGE.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def _imported(tree: ast.Module, package: list[str]) -> Iterator[tuple[list[str], int]]:
    """Every module of this package that `tree` imports (its path below the package), with the line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == ROOT:
                    yield parts[1:], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    continue
                base = package[: len(package) - (node.level - 1)]
            elif node.module is not None and node.module.split(".")[0] == ROOT:
                base = []
            else:
                continue
            named = node.module.split(".") if node.module else []
            if node.level == 0:
                named = named[1:]
            module = base + named
            if module:
                yield module, node.lineno
            else:  # `from .. import errors`: each name is a module, or something of the package's `__init__`
                for alias in node.names:
                    yield ([alias.name] if _is_module([alias.name]) else []), node.lineno


def import_graph() -> Graph:
    """Which layer imports which, and where."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        source = _node(parts)
        package = parts[:-1]
        edges = graph.setdefault(source, {})
        for module, line in _imported(ast.parse(path.read_text("utf-8"), str(path)), package):
            target = _node(module)
            if target != source:
                edges.setdefault(target, []).append(f"{'/'.join(parts)}.py:{line}")
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """A cycle of `graph` as its nodes (the first one repeated at the end), or None when it has none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done:
                found = visit(target)
                if found is not None:
                    return found
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done:
            found = visit(node)
            if found is not None:
                return found
    return None


def tangles(graph: Graph) -> list[list[str]]:
    """The groups of nodes that all reach one another (strongly connected, more than one node), each sorted."""
    reaches = {node: _reachable(graph, node) for node in graph}
    groups = {frozenset(other for other in reaches[node] if node in reaches.get(other, ())) for node in graph}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def _reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), {}):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def describe(graph: Graph) -> str:
    """Every tangle: its layers, a cycle through them, and each import from one of them to another."""
    lines = []
    for group in tangles(graph):
        inside = {node: {t: w for t, w in graph[node].items() if t in group} for node in group}
        cycle = find_cycle(inside)
        assert cycle is not None
        lines.append(f"layers importing each other: {', '.join(group)}; a cycle: {' -> '.join(cycle)}")
        for node in group:
            lines += [f"  {node} -> {target}: {', '.join(where)}" for target, where in sorted(inside[node].items())]
    return "\n".join(lines)


def test_no_layer_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "\n" + describe(graph)


def test_every_kind_of_import_is_an_edge() -> None:
    """Imports at the top, inside functions and under `TYPE_CHECKING`, relative and absolute, are all edges (else a
    cycle could hide)."""
    source = """
from typing import TYPE_CHECKING
import adapter_critic.store.runstore
from .. import errors, __version__
from ..protocols.base import Inbound
from . import chat
if TYPE_CHECKING:
    from ..observe.metrics import Metrics
def later():
    from adapter_critic.pipeline import run
"""
    found = sorted((line, _node(module)) for module, line in _imported(ast.parse(source), ["http"]))
    assert found == [
        (3, "store"), (4, ROOT), (4, "errors"), (5, "protocols"), (6, "http"), (8, "observe"), (10, "pipeline")
    ]  # fmt: skip
    graph = import_graph()
    assert {"config", "protocols", "errors"} <= set(graph["http"])
    assert "http" in graph[ROOT]


def test_a_cycle_is_found_and_named_with_its_imports() -> None:
    graph = {"a": {"b": ["a/x.py:1"]}, "b": {"c": ["b/y.py:2"], "d": ["b/y.py:3"]}, "c": {"a": ["c.py:3"]}, "d": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert describe(graph) == (
        "layers importing each other: a, b, c; a cycle: a -> b -> c -> a\n"
        "  a -> b: a/x.py:1\n  b -> c: b/y.py:2\n  c -> a: c.py:3"
    )
    assert find_cycle({"a": {"b": []}, "b": {}, "c": {"a": [], "b": []}}) is None


def file_graph() -> Graph:
    """Which module imports which (each a path below the package without `.py`; a package is its `__init__`), and
    where: the same imports as `import_graph`, file by file, inside subpackages as well as between them."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        source = "/".join(parts)
        edges = graph.setdefault(source, {})
        for module, line in _file_imports(ast.parse(path.read_text("utf-8"), str(path)), parts[:-1]):
            target = _file(module)
            if target is not None and target != source:
                edges.setdefault(target, []).append(f"{source}.py:{line}")
    return graph


def _file_imports(tree: ast.Module, package: list[str]) -> Iterator[tuple[list[str], int]]:
    """Every module of this package that `tree` imports; `from . import wire` names the module `wire` (or, for a
    name that is no module, the package's `__init__`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is None:
            base = package[: len(package) - (node.level - 1)]
            for alias in node.names:
                yield ([*base, alias.name] if _is_module([*base, alias.name]) else base), node.lineno
        elif isinstance(node, ast.Import | ast.ImportFrom):
            yield from _imported(ast.Module(body=[node], type_ignores=[]), package)


def _file(module: list[str]) -> str | None:
    """The file an imported module path names: the module itself, or a package's `__init__` (None: not ours)."""
    for end in range(len(module), -1, -1):  # `from .x import name` may name a function of module x
        parts = module[:end]
        if parts and PACKAGE.joinpath(*parts).with_suffix(".py").is_file():
            return "/".join(parts)
        if PACKAGE.joinpath(*parts, "__init__.py").is_file():
            return "/".join([*parts, "__init__"])
    return None


def test_no_module_imports_one_that_imports_it_back() -> None:
    """Inside a subpackage too, and through `TYPE_CHECKING` imports: no two files import each other, directly or
    through others (a package's `__init__` counts as a file)."""
    graph = file_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "\n" + describe(graph)


def test_the_file_graph_reads_each_kind_of_import() -> None:
    """A module named by `from . import x` is its own file; `from ..x import name` is module x's file."""
    graph = file_graph()
    assert "protocols/anthropic/wire" in graph["protocols/anthropic/inbound"]
    assert "protocols/anthropic/__init__" not in graph["protocols/anthropic/inbound"]
    assert "errors" in graph["http/chat"] and "config/__init__" in graph["service/chat"]


def test_no_module_of_the_http_layer_is_a_hub() -> None:
    """`http/` decodes and renders; the domain lives below it: none of its modules imports more than 14 of the
    package's own (the service layer, `service/`, holds the request's steps)."""
    graph = file_graph()
    hubs = {name: len(edges) for name, edges in graph.items() if name.startswith("http/") and len(edges) > 14}
    assert not hubs, hubs
