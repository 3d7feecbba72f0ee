"""Property-based tests (hypothesis) of the demo model with hostile input: any JSON schema a client sends as a tool's
parameters or a `response_format` (self-referring, unsatisfiable, huge counts, bad bounds, any `pattern`) gives a
JSON value, made at once — never an exception, never a wait as long as the schema asks for."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapter_critic.demo.patterns import example as pattern_example
from adapter_critic.demo.values import FORMATS, Filler

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.integers(-(10**30), 10**30) | st.floats() | st.booleans() | st.text(max_size=2)
counts = st.integers(-5, 10**12) | st.floats() | st.none()
names = st.sampled_from(["a", "b", "answer", "query", "tags", "x_y", "firstName", ""])
types = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "weird"])
refs = st.sampled_from(["#", "#/$defs/a", "#/$defs/b", "#/properties/a", "#/$defs/~1x", "other.json#/x", "#/0"])


def keywords(child: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": types | st.lists(types, max_size=3),
            "properties": st.dictionaries(names, child, max_size=3),
            "required": st.lists(names, max_size=3),
            "additionalProperties": st.booleans() | child,
            "items": child | st.lists(child, max_size=2),
            "prefixItems": st.lists(child, max_size=2),
            "minItems": counts,
            "maxItems": counts,
            "minLength": counts,
            "maxLength": counts,
            "minProperties": counts,
            "uniqueItems": st.booleans(),
            "minimum": numbers,
            "maximum": numbers,
            "exclusiveMinimum": numbers,
            "exclusiveMaximum": numbers,
            "multipleOf": numbers,
            "enum": st.lists(st.integers() | st.text(max_size=3), max_size=3),
            "const": st.integers() | st.text(max_size=3),
            "pattern": st.text(max_size=12) | st.sampled_from([r"^\d{5}$", r"(a+)+$", r"^(a|aa)*b$", r"x{99999}"]),
            "format": st.sampled_from([*FORMATS, "nonsense"]),
            "$ref": refs,
            "$defs": st.dictionaries(st.sampled_from(["a", "b"]), child, max_size=2),
            "anyOf": st.lists(child, max_size=3),
            "oneOf": st.lists(child, max_size=3),
            "allOf": st.lists(child, max_size=3),
        },
    )


schemas = st.recursive(st.just({}) | st.booleans() | st.none(), keywords, max_leaves=12)
SELF_TWICE = {"$defs": {"a": {"required": ["l", "r"], "properties": {"l": {"$ref": "#/$defs/a"}, "r": {"$ref": "#"}}}}}


@FUZZ
@given(schemas)
@example({"type": "array", "minItems": 10**12, "items": {"type": "string", "minLength": 10**12}})
@example({"$ref": "#/$defs/a", **SELF_TWICE})
@example({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]})
@example({"type": "object", "minProperties": 10**9, "additionalProperties": {"type": "integer"}})
@example({"type": "number", "minimum": 1e308, "multipleOf": 1e-308})
@example({"type": "string", "pattern": "(a+)+$"})
@example({"type": "string", "pattern": "^(a|aa)*b$", "minLength": 3})
def test_any_schema_gives_a_json_value_at_once(schema: Any) -> None:
    value = Filler(schema, "Demo answer.", "what the user said, at length " * 6).fill()
    json.dumps(value)


PLAIN = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": r"^[A-Z]{2}-\d{3}$"},
        "size": {"type": "integer", "minimum": 3, "maximum": 9, "multipleOf": 3},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "ids": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1, "maximum": 4},
            "minItems": 4,
            "uniqueItems": True,
        },
        "name": {"type": "string", "minLength": 12, "maxLength": 14},
    },
    "required": ["code", "size", "score", "ids", "name"],
}


def test_bounds_lengths_and_patterns_are_met() -> None:
    value = Filler(PLAIN, "answer", "said").fill()
    jsonschema.validate(value, PLAIN)
    assert value["code"] == "AB-123" and value["size"] == 6 and value["ids"] == [2, 3, 4, 1]


@FUZZ
@given(st.from_regex(re.compile(r"[a-z0-9\\\[\]\-\^(){}|?*+.$]{0,14}"), fullmatch=True))
def test_a_pattern_example_matches_or_is_none(pattern: str) -> None:
    found = pattern_example(pattern)
    if found is not None:
        assert re.search(pattern, found) is not None
