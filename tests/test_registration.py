"""The built-in workflows and protocols are registered in one place, the entry points of pyproject.toml: the
installed package's metadata and the source tree's fallback (read when the package was never installed) name
exactly the same classes, and the registries list exactly those, in their stated order, before any plug-in."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

import pytest

from adapter_critic import plugins
from adapter_critic.protocols import registry as protocols
from adapter_critic.workflows import registry as workflows

GROUPS = [(workflows.GROUP, workflows.LISTED_FIRST), (protocols.GROUP, protocols.LISTED_FIRST)]


@pytest.mark.parametrize(("group", "listed_first"), GROUPS)
def test_the_source_tree_fallback_matches_the_installed_entry_points_exactly(
    group: str, listed_first: tuple[str, ...]
) -> None:
    installed = {entry.name: entry.value for entry in distribution("adapter_critic").entry_points.select(group=group)}
    assert installed
    assert plugins.source_tree_entry_points(group) == installed
    assert set(listed_first) == set(installed)


@pytest.mark.parametrize(("group", "listed_first"), GROUPS)
def test_without_metadata_the_built_ins_come_from_the_source_tree(
    group: str, listed_first: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_installed(name: str) -> None:
        raise PackageNotFoundError(name)

    installed = plugins.built_in_entry_points(group)
    monkeypatch.setattr(plugins, "distribution", not_installed)
    assert plugins.built_in_entry_points(group) == installed
    base = workflows.Workflow if group == workflows.GROUP else protocols.Protocol
    assert list(plugins.load_plugins(group, base, "test", listed_first))[: len(listed_first)] == list(listed_first)


def test_the_registries_list_the_built_ins_first_in_their_order() -> None:
    assert list(workflows.workflows())[:6] == ["direct", "adapter", "critic", "advisor", "panel", "best_of_n"]
    assert list(protocols.protocols())[:3] == ["openai", "anthropic", "responses"]
