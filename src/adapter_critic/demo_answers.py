"""What the demo model says when a request asks for more than text: a tool call for a tool the user named,
and JSON that fits a `response_format` (a JSON object, or an instance of a JSON Schema's required shape)."""

from __future__ import annotations

import json
import re
from typing import Any


def tool_call(tools: list[Any] | None, last_user_text: str) -> dict[str, Any] | None:
    """A call of the first function tool whose name the user's message mentions, with arguments that fit its
    parameters' schema; None when no tool is named."""
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        if isinstance(name, str) and name and re.search(rf"\b{re.escape(name)}\b", last_user_text):
            arguments = instance(function.get("parameters") or {"type": "object"}, "demo")
            return {
                "id": f"call_demo_{name}"[:40],
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
    return None


def drafted_calls(draft: str) -> list[Any] | None:
    """The tool calls of a draft as the critic's second pass shows it (`Tool calls: [...]` after its text)."""
    _, found, rendered = draft.partition("Tool calls: ")
    if not found:
        return None
    try:
        calls = json.loads(rendered)
    except ValueError:
        return None
    return calls if isinstance(calls, list) and calls else None


def structured(response_format: dict[str, Any], text: str) -> str:
    """`text` as the JSON the response format asks for: `{"answer": text}` for `json_object`, an instance of
    the schema (its strings the text) for `json_schema`; the text itself for any other format."""
    kind = response_format.get("type")
    if kind == "json_object":
        return json.dumps({"answer": text})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return json.dumps(instance(schema if isinstance(schema, dict) else {"type": "object"}, text))
    return text


def instance(schema: dict[str, Any], text: str, depth: int = 0) -> Any:
    """A small value that fits `schema`: required properties filled in, strings set to `text`."""
    if depth > 8:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {key: instance(properties.get(key) or {}, text, depth + 1) for key in required}
    if kind == "array":
        items = schema.get("items")
        count = max(1, int(schema.get("minItems", 1)))
        return [instance(items if isinstance(items, dict) else {}, text, depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return schema.get("minimum", 0)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return text
