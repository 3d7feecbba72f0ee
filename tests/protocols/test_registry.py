"""The protocol registry: the built-in protocols from the entry-point group, and `[protocols.<name>]` and
`protocol = "…"` checked at load."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from adapter_critic import Config
from adapter_critic.errors import ConfigError
from adapter_critic.plugins import source_tree_entry_points
from adapter_critic.protocols import registry
from adapter_critic.protocols.base import Inbound, UpstreamWire


def _config(**target: Any) -> dict[str, Any]:
    api = {"model": "m", "base_url": "http://up.test/v1", **target}
    return {"served_models": {"x": {"mode": "direct", "api": api}}}


def test_the_built_in_protocols_are_registered_as_entry_points() -> None:
    registered = {entry.name: entry.value for entry in entry_points(group=registry.GROUP)}
    built_in = source_tree_entry_points(registry.GROUP)
    for name, reference in built_in.items():
        assert registered[name] == reference
    assert set(built_in) <= set(registry.names())


def test_openai_serves_chat_completions_and_calls_chat_completions() -> None:
    sides = registry.sides()
    assert isinstance(sides.inbound["/chat/completions"], Inbound)
    wire = sides.wire("openai")
    assert isinstance(wire, UpstreamWire)
    assert wire.path == "/chat/completions"
    assert wire.headers("k") == {"authorization": "Bearer k"}
    assert wire.headers(None) == {}


def test_a_target_naming_an_unknown_protocol_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="unknown protocol 'smtp'"):
        Config.from_dict(_config(protocol="smtp"))


def test_a_protocols_table_for_an_unknown_protocol_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"protocols\.smtp: unknown protocol"):
        Config.from_dict({**_config(), "protocols": {"smtp": {}}})


def test_a_target_speaks_openai_unless_it_says_otherwise() -> None:
    assert Config.from_dict(_config()).served_models["x"].api.protocol == "openai"
