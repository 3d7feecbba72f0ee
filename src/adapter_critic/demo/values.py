"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A JSON value that fits a JSON schema, with plausible values: what the demo model puts in a tool call's arguments
and answers under `response_format: json_schema`.

Types are right, required properties present (optional ones filled in too, as a model tends to), `enum`/`const`,
bounds, lengths, item counts, `format`s and `pattern`s (`demo.patterns`) respected; local `$ref`s (Pydantic's `$defs`),
`allOf`, `anyOf` and `oneOf` (a `null` option passed over) are followed. Strings say what they are: an answer-like
property (`answer`, `summary`, …) holds the demo model's reply, a query-like one (`query`, `question`, …) the user's
words, any other `demo <its name>`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .patterns import compiled, example

# Properties whose string is the reply itself, and those whose string is what the user asked.
ANSWER_KEYS = frozenset(
    {"answer", "response", "reply", "text", "content", "message", "summary", "explanation", "output", "result"}
)
QUERY_KEYS = frozenset({"query", "q", "question", "prompt", "input", "search", "search_query", "topic", "request"})
FORMATS = {
    "date": "2025-01-15",
    "date-time": "2025-01-15T09:30:00Z",
    "time": "09:30:00Z",
    "duration": "P1D",
    "email": "demo@example.com",
    "idn-email": "demo@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/demo",
    "iri": "https://example.com/demo",
    "url": "https://example.com/demo",
    "uri-reference": "/demo",
    "iri-reference": "/demo",
    "uuid": "3f2b8c1e-4d5a-4e6f-9a7b-1c2d3e4f5a6b",
    "json-pointer": "/demo",
    "regex": "^demo$",
}
# From this many nested levels on, optional properties are left out and arrays hold only their `minItems`.
_DEEP = 3
_DEEPEST = 32
# A schema can ask for more than any answer holds (`minItems: 1e9`, a `$ref` to itself twice over): the values and
# schema steps one answer is made of, items or properties one value gets, and characters a string gets are capped.
# Past the caps the value is small and may not fit; the answer is still made, at once.
_WORK = 5000
_MOST = 64
_LONGEST = 4096
_SHORT = 24


class Filler:
    """Fills in the schemas of one answer: `root` is where its `$ref`s point, `text` the reply, `said` the user's
    words."""

    def __init__(self, root: Any, text: str, said: str) -> None:
        self.root, self.text, self.said = root, text, said
        self.left = _WORK

    def fill(self) -> Any:
        """A value of the whole schema (`root`)."""
        try:
            return self.value(self.root)
        except RecursionError:
            return {}

    def value(self, schema: Any, key: str = "", depth: int = 0, index: int = 0) -> Any:
        """A value fitting `schema`, for the property `key` (the `index`-th item of an array of them)."""
        schema = self.resolved(schema, depth)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[index % len(enum)]
        kind = _kind(schema)
        self.left -= 1
        if depth > _DEEPEST or self.left < 0:
            return None if kind == "null" else {} if kind == "object" else [] if kind == "array" else 0
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, key, depth)
        if kind in ("integer", "number"):
            try:
                return _number(schema, kind == "integer", index)
            except (OverflowError, ValueError, ZeroDivisionError):  # bounds no float can meet
                return 0
        if kind == "boolean":
            return index % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, key, index)

    def resolved(self, schema: Any, depth: int = 0) -> dict[str, Any]:
        """`schema` with its `$ref` followed, `allOf` merged and an `anyOf`/`oneOf` option chosen."""
        for _ in range(_DEEPEST):
            self.left -= 1
            if not isinstance(schema, dict) or depth > _DEEPEST or self.left < 0:
                return {}
            if isinstance(schema.get("$ref"), str):
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = {**_pointed(self.root, schema["$ref"]), **rest}
            elif isinstance(schema.get("allOf"), list):
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                schema = _merged([self.resolved(part, depth + 1) for part in schema["allOf"]] + [rest])
            elif isinstance(options := schema.get("anyOf") or schema.get("oneOf"), list):
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                resolved = [self.resolved(option, depth + 1) for option in options]
                # `null` where it may be, once deep (a recursive schema ends); else the first other option
                nulls = [option for option in resolved if _kind(option) == "null"]
                others = [option for option in resolved if _kind(option) != "null"]
                chosen = (nulls if depth >= _DEEP and nulls else others or resolved or [{}])[0]
                schema = _merged([rest, chosen])
            else:
                return schema
        return {}

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        given = schema.get("properties")
        properties: dict[str, Any] = given if isinstance(given, dict) else {}
        required = [key for key in schema.get("required") or () if isinstance(key, str)]
        keys = required + [key for key in properties if key not in required and depth < _DEEP]
        extra = schema.get("additionalProperties")
        if not keys and isinstance(extra, dict) and depth < _DEEP:  # a map: one entry
            keys = ["demo"]
        value = {key: self.value(properties.get(key, extra), key, depth + 1) for key in keys}
        fewest = _count(schema.get("minProperties"))
        while fewest is not None and len(value) < fewest and extra is not False:
            key = f"demo_{len(value) + 1}"
            value[key] = self.value(extra, key, depth + 1)
        return value

    def _array(self, schema: dict[str, Any], key: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list):  # an older draft's tuple form
            prefix, items = items, schema.get("additionalItems")
        prefix = prefix if isinstance(prefix, list) else []
        least, most = _count(schema.get("minItems")), _count(schema.get("maxItems"))
        count = min(max(least if least is not None else 1 if depth < _DEEP else 0, len(prefix)), _MOST)
        if most is not None:
            count = min(count, most)
        item = _singular(key)
        return [self.value(prefix[i] if i < len(prefix) else items, item, depth + 1, index=i) for i in range(count)]

    def _string(self, schema: dict[str, Any], key: str, index: int) -> str:
        shortest, longest = _count(schema.get("minLength")) or 0, _count(schema.get("maxLength"))
        name = key.lower()
        named = f"demo {_words(key)}".strip() + (f" {index + 1}" if index else "")
        if schema.get("format") in FORMATS:
            text = FORMATS[schema["format"]]
        elif name in ANSWER_KEYS and self.text and (longest is None or len(self.text) + 64 <= longest):
            text = self.text  # room to spare: reviewers' edits of it keep it within bounds
        elif (name in QUERY_KEYS or "query" in name) and self.said:
            text = self.said
        else:
            text = named
        pattern = schema.get("pattern")
        if isinstance(pattern, str):  # tried on short strings only: a pattern may backtrack for ever on a long one
            tried = [t for t in (text, named) if len(t) <= _SHORT]
            text = next((t for t in tried if _matches(pattern, t)), None) or example(pattern) or named
        if len(text) < shortest:
            text = (text + " demo" * (min(shortest, _LONGEST) // 5 + 1))[: max(shortest, len(text))]
        if longest is not None and len(text) > longest:
            text = text[:longest] if len(text[:longest].rstrip()) < shortest else text[:longest].rstrip()
        return text


def _count(value: Any) -> int | None:
    """A count a schema gives (`minItems`, `maxLength`, …), within the caps; None when it gives none."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return max(0, min(value, _LONGEST))


def _kind(schema: dict[str, Any]) -> str:
    """The type a value of `schema` gets: its `type` (the first not `null` of several), else what its keywords say."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null" if kind else None)
    if isinstance(kind, str):
        return kind
    if any(k in schema for k in ("properties", "required", "additionalProperties", "minProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return "number"
    return "string"


def _number(schema: dict[str, Any], integer: bool, index: int) -> int | float:
    """A number within the bounds: the middle when there are two, else a small one (1, or 1.5), stepped by `index`."""
    low, low_open = _side(schema, "minimum", "exclusiveMinimum", lower=True)
    high, high_open = _side(schema, "maximum", "exclusiveMaximum", lower=False)
    if integer:  # as inclusive whole bounds
        if low is not None:
            low, low_open = (math.floor(low) + 1 if low_open else math.ceil(low)), False
        if high is not None:
            high, high_open = (math.ceil(high) - 1 if high_open else math.floor(high)), False
    if low is not None and high is not None:  # the middle, and other values inside for later items
        if integer:
            value: float = low + ((high - low) // 2 + index) % (high - low + 1) if high >= low else low
        else:
            value = low + (high - low) * (index + 1) / (index + 2)
    else:
        value = (1 if integer else 1.5) + index
        if low is not None and (value < low or (low_open and value <= low)):
            value = low + 1
        if high is not None and (value > high or (high_open and value >= high)):
            value = high - 1
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and _is_number(step) and step > 0:
        value = math.ceil(value / step) * step
        if high is not None and value > high:
            value = math.floor(high / step) * step
        value = float(f"{value:.12g}")
    if integer:
        return math.floor(value)
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _side(schema: dict[str, Any], inclusive: str, exclusive: str, *, lower: bool) -> tuple[float | None, bool]:
    """The tightest bound the schema puts on one side of a number, and whether it is exclusive."""
    plain, strict = schema.get(inclusive), schema.get(exclusive)
    bounds: list[tuple[float, bool]] = []
    if isinstance(plain, int | float) and _is_number(plain):
        bounds.append((plain, strict is True))  # draft 4: `exclusiveMinimum: true` makes `minimum` exclusive
    if isinstance(strict, int | float) and _is_number(strict):
        bounds.append((strict, True))
    if not bounds:
        return None, False
    return max(bounds) if lower else min(bounds, key=lambda bound: (bound[0], not bound[1]))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """`allOf`'s parts as one schema: their properties and required keys together, other keywords the last part's."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [
                    *merged.get("required", []),
                    *(k for k in value if k not in merged.get("required", [])),
                ]
            else:
                merged[key] = value
    return merged


def _pointed(root: Any, ref: str) -> dict[str, Any]:
    """The schema a local `$ref` (`#/$defs/Name`) points at in `root`; an empty one (any value) for any other."""
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node if isinstance(node, dict) else {}


def _words(key: str) -> str:
    """A property name as words: `firstName`, `first_name` and `first-name` are `first name`."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return " ".join(re.split(r"[\s_\-]+", spaced)).strip().lower()


def _singular(key: str) -> str:
    """The name an item of an array property goes by: `tags` → `tag`."""
    return key[:-1] if len(key) > 3 and key.endswith("s") and not key.endswith("ss") else key


def _matches(pattern: str, text: str) -> bool:
    try:
        return compiled(pattern).search(text) is not None
    except re.error:
        return True  # a pattern Python cannot read is not one the demo can aim at
