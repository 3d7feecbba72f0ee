"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the demo model says when a request asks for more than text (a tool call for a tool the user named, JSON
that fits a `response_format`), and its part in the advisor, panel and best-of-n workflows (each stage's reply
names its stage, so every stage can be seen in the extension)."""

from __future__ import annotations

import json
import re
from typing import Any

from .workflows.advice import DEFAULT_ADVISOR_SYSTEM_PROMPT, GUIDANCE_OPEN
from .workflows.judging import DEFAULT_PAIRWISE_SYSTEM_PROMPT
from .workflows.lenses import DEFAULT_COORDINATOR_SYSTEM_PROMPT, DEFAULT_LENSES


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


# -- the demo model's parts in the advisor, panel and best-of-n workflows --------------------------------------
ADVICE = "- Demo advisor: answer the last message directly, and say that an advisor's guidance was followed."
ADVISED_LEAD = "Demo model answer, written after the demo advisor's guidance (this is not a real LLM)."
PANEL_LEAD = "- The draft does not say that a panel reviewed it"
_LENS_NAMES = {lens.system_prompt: lens.name for lens in DEFAULT_LENSES}
_REPLY = re.compile(r"<reply_([AB])>\n(.*?)\n</reply_\1>", re.DOTALL)
_SEED = re.compile(r"sampled with seed (\d+)")


def stage_reply(system: str, last: str) -> str | None:
    """What the demo model says as the advisor, a panel lens, the coordinator or the judge (None: none of them)."""
    if system == DEFAULT_ADVISOR_SYSTEM_PROMPT:
        return ADVICE
    if system in _LENS_NAMES:
        name = _LENS_NAMES[system]
        return f"{PANEL_LEAD} (demo {name} lens); say so in the revised answer."
    if system == DEFAULT_COORDINATOR_SYSTEM_PROMPT:
        critiques = last.partition("<critiques>")[2]
        lenses = re.findall(r"^\[([A-Za-z0-9_.-]+)\]$", critiques, re.MULTILINE)
        return f"1. [{', '.join(lenses)}] {PANEL_LEAD[2:]}: say so in the revised answer (demo coordinator)."
    if system == DEFAULT_PAIRWISE_SYSTEM_PROMPT:
        seeds = {label: _seed_of(reply) for label, reply in _REPLY.findall(last)}
        a, b = seeds.get("A", 0), seeds.get("B", 0)
        winner = "A" if a > b else "B" if b > a else "tie"
        reason = f"Demo judge: reply A was sampled with seed {a}, reply B with seed {b}; it prefers the higher seed."
        return f"{reason}\nWinner: {winner}"
    return None


def advised(user_text: str) -> tuple[str, bool]:
    """The user's own text of a message the advisor's guidance was appended to, and whether it was."""
    own, found, _ = user_text.partition(GUIDANCE_OPEN)
    return (own.strip(), True) if found else (user_text, False)


def candidate_note(seed: Any) -> str:
    """How a demo draft shows the seed it was sampled with (best-of-n gives each candidate its own)."""
    return f"\n(Demo candidate sampled with seed {seed}.)" if isinstance(seed, int) else ""


def _seed_of(reply: str) -> int:
    found = _SEED.search(reply)
    return int(found.group(1)) if found else 0
