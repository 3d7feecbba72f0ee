"""A workflow declares each setting once: a `PerRequest` mark on a `Settings` field lets a request choose it, and the
Struct a request's settings are decoded into (`RequestSettings`) is derived from the marks — typed as the config's
field, or as strictly as the mark says (`cap`, `items`, `pattern`). A plug-in may still give its own
`RequestSettings`, though not beside marks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pytest

from adapter_critic import PerRequest, Workflow
from adapter_critic.workflows import registry
from adapter_critic.workflows.base import NoSettings
from adapter_critic.workflows.settings import request_settings


class Item(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    target: str | None = None


class RequestItem(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str


class VoteSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    voters: Annotated[int, msgspec.Meta(ge=1, le=16), PerRequest(cap=8)] = 3
    weight: Annotated[float, msgspec.Meta(ge=0, le=2), PerRequest()] = 1.0
    ballot: Annotated[str, msgspec.Meta(min_length=1, max_length=100), PerRequest(cap=10, pattern="^(yes|no)$")] = "y"
    items: Annotated[list[Item], msgspec.Meta(min_length=1, max_length=32), PerRequest(cap=4, items=RequestItem)] = (
        msgspec.field(default_factory=lambda: [Item("a")])
    )
    style: Annotated[Literal["terse", "long"], PerRequest()] = "terse"
    prompt: Annotated[str | None, PerRequest()] = None
    options: dict[str, Any] = {}  # not marked: the operator's alone


def decode(kind: type[msgspec.Struct], given: dict[str, Any]) -> msgspec.Struct:
    return msgspec.json.decode(msgspec.json.encode(given), type=kind)


def refusal(kind: type[msgspec.Struct], given: dict[str, Any]) -> str:
    with pytest.raises(msgspec.ValidationError) as refused:
        decode(kind, given)
    return str(refused.value)


def test_the_marked_fields_are_a_request_s_in_their_order_each_optional() -> None:
    kind = request_settings(VoteSettings)
    assert kind.__name__ == "VoteRequestSettings"
    assert kind.__struct_fields__ == ("voters", "weight", "ballot", "items", "style", "prompt")
    assert decode(kind, {}) == kind()  # nothing given: every field None, the served model's values stand
    assert all(getattr(kind(), name) is None for name in kind.__struct_fields__)
    assert "unknown field `options`" in refusal(kind, {"options": {"model": "other"}})


def test_a_request_s_value_is_checked_as_the_config_s_and_within_the_cap() -> None:
    kind = request_settings(VoteSettings)
    chosen = decode(kind, {"voters": 8, "weight": 2, "ballot": "no", "items": [{"name": "b"}], "style": "long"})
    assert chosen == kind(voters=8, weight=2.0, ballot="no", items=[RequestItem("b")], style="long")  # type: ignore[call-arg]
    assert "Expected `int` <= 8 - at `$.voters`" in refusal(kind, {"voters": 9})  # the config allows 16
    assert "Expected `int` >= 1 - at `$.voters`" in refusal(kind, {"voters": 0})  # the config's lower bound stands
    assert "Expected `float` <= 2.0 - at `$.weight`" in refusal(kind, {"weight": 3})
    assert "Expected `array` of length <= 4 - at `$.items`" in refusal(kind, {"items": [{"name": "b"}] * 5})
    assert "Expected `array` of length >= 1" in refusal(kind, {"items": []})
    assert "unknown field `target` - at `$.items[0]`" in refusal(kind, {"items": [{"name": "b", "target": "x"}]})
    assert "matching regex '^(yes|no)$' - at `$.ballot`" in refusal(kind, {"ballot": "maybe"})
    assert "Expected `str` of length <= 10 - at `$.ballot`" in refusal(kind, {"ballot": "y" * 11})
    assert "Expected `str` matching" not in refusal(kind, {"style": "loud"})


def test_a_workflow_s_request_settings_come_from_its_marks() -> None:
    class Vote(Workflow):
        name = "vote"
        Settings = VoteSettings

    class Plain(Workflow):
        name = "plain"
        Settings = Item

    assert Vote.RequestSettings.__struct_fields__ == request_settings(VoteSettings).__struct_fields__
    assert Plain.RequestSettings is NoSettings  # nothing marked: a request chooses none of its settings


def test_a_plugin_may_give_its_own_request_settings_but_not_beside_marks() -> None:
    class Own(Workflow):
        name = "own"
        Settings = Item
        RequestSettings = RequestItem

    assert Own.RequestSettings is RequestItem
    with pytest.raises(TypeError, match="either as PerRequest marks of `Settings` or as `RequestSettings`"):

        class Both(Workflow):
            name = "both"
            Settings = VoteSettings
            RequestSettings = RequestItem


def test_settings_whose_annotations_do_not_resolve_keep_a_workflow_s_own_request_settings() -> None:
    class Local(msgspec.Struct):
        x: int = 0

    class LocalSettings(msgspec.Struct):
        local: Local | None = None  # a string under `from __future__ import annotations`, naming no module global

    class Own(Workflow):
        name = "own"
        Settings = LocalSettings
        RequestSettings = RequestItem

    assert Own.RequestSettings is RequestItem
    with pytest.raises(NameError):

        class Derived(Workflow):
            name = "derived"
            Settings = LocalSettings


def test_a_mark_that_cannot_apply_is_refused_when_the_workflow_is_defined() -> None:
    class Above(msgspec.Struct):
        n: Annotated[int, msgspec.Meta(le=4), PerRequest(cap=8)] = 1

    class Flag(msgspec.Struct):
        on: Annotated[bool, PerRequest(cap=1)] = False

    class NotAList(msgspec.Struct):
        name: Annotated[str, PerRequest(items=int)] = ""

    with pytest.raises(TypeError, match=r"n: PerRequest\(cap=8\) is above the setting's own bound"):
        request_settings(Above)
    with pytest.raises(TypeError, match=r"on: PerRequest\(cap=\.\.\.\) marks a setting that is not a number"):
        request_settings(Flag)
    with pytest.raises(TypeError, match=r"name: PerRequest\(items=\.\.\.\) marks a setting that is not a list"):
        request_settings(NotAList)


def test_the_built_in_caps_are_below_the_config_s() -> None:
    """Each built-in setting a request may choose and that costs upstream calls is capped below the config's bound."""
    caps = {
        "adapter": {"max_adapter_retries": (5, 10)},
        "best_of_n": {"n": (8, 16)},
        "self_consistency": {"n": (8, 16)},
        "self_refine": {"max_rounds": (5, 10)},
        "chain_of_verification": {"max_questions": (8, 16)},
        "panel": {"lenses": (8, 32)},
        "mixture_of_agents": {"layers": (3, 4)},
    }
    for mode, fields in caps.items():
        workflow = registry.get(mode)
        for key, (request_cap, config_cap) in fields.items():
            assert _upper(workflow.RequestSettings, key) == request_cap, (mode, key)
            assert _upper(workflow.Settings, key) == config_cap, (mode, key)


def _upper(kind: type[msgspec.Struct], key: str) -> int:
    [field] = [f for f in msgspec.inspect.type_info(kind).fields if f.name == key]
    info = field.type
    if isinstance(info, msgspec.inspect.UnionType):
        [info] = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
    bound = getattr(info, "le", None)
    bound = bound if bound is not None else getattr(info, "max_length", None)
    assert isinstance(bound, int)
    return bound
