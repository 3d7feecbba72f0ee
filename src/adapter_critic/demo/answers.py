"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the demo model says when a request asks for more than text (a tool call, JSON that fits a
`response_format`), where it stops (`stop`, `max_tokens`), and its part in the advisor, panel, best-of-n,
self-consistency and self-refine
workflows (each stage's reply names its stage, so every stage can be seen in the extension)."""

from __future__ import annotations

import json
import re
from decimal import Decimal, DivisionByZero, InvalidOperation
from typing import Any

from ..workflows.advice import DEFAULT_ADVISOR_SYSTEM_PROMPT, GUIDANCE_OPEN
from ..workflows.judging import DEFAULT_PAIRWISE_SYSTEM_PROMPT
from ..workflows.lenses import DEFAULT_COORDINATOR_SYSTEM_PROMPT, DEFAULT_LENSES
from ..workflows.re2 import DEFAULT_LEAD as REREAD
from ..workflows.self_consistency import DEFAULT_CONSISTENCY_SYSTEM_PROMPT
from ..workflows.self_refine import DEFAULT_FEEDBACK_SYSTEM_PROMPT, REFINE_INSTRUCTION, STOP_PHRASE
from .values import Filler


def functions(tools: list[Any] | None) -> list[dict[str, Any]]:
    """The request's function tools (their `function` objects), in order."""
    found = [tool.get("function") for tool in tools or () if isinstance(tool, dict) and tool.get("type") == "function"]
    return [f for f in found if isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"]]


def forced_name(tool_choice: Any) -> Any:
    """The function `tool_choice` names (`{"type": "function", "function": {"name": ...}}`), else None."""
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def choice_problem(tool_choice: Any, offered: list[dict[str, Any]]) -> str | None:
    """Why the demo model refuses `tool_choice`, as a real one does (a function that is not offered); else None."""
    name = forced_name(tool_choice)
    if name is None or name in [f["name"] for f in offered]:
        return None
    return f"`tool_choice` names the function {name!r}, which is not in `tools`."


def named_in(offered: list[dict[str, Any]], text: str) -> dict[str, Any] | None:
    """The first function whose name `text` mentions."""
    return next((f for f in offered if re.search(rf"\b{re.escape(f['name'])}\b", text)), None)


def call_of(function: dict[str, Any], text: str, said: str) -> dict[str, Any]:
    """A call of `function` with arguments that fit its parameters' schema (`demo.values`)."""
    parameters = function.get("parameters")
    schema = parameters if isinstance(parameters, dict) else {"type": "object"}
    arguments = Filler(schema, text, said).fill()
    return {
        "id": f"call_demo_{function['name']}"[:40],
        "type": "function",
        "function": {"name": function["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def drafted_calls(draft: str) -> list[Any] | None:
    """The tool calls of a draft as the critic's second pass shows it (`Tool calls: [...]` after its text)."""
    _, found, rendered = draft.partition("Tool calls: ")
    if not found:
        return None
    try:
        calls = json.loads(rendered)
    except ValueError:
        return None
    formed = [call for call in calls if called(call) is not None] if isinstance(calls, list) else []
    return formed or None


def called(call: Any) -> str | None:
    """The name of the function a well-formed call (with string arguments) calls."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return None
    name = function.get("name")
    return name if isinstance(name, str) else None


def structured(response_format: dict[str, Any], text: str, said: str) -> str:
    """`text` as the JSON the response format asks for: `{"answer": text}` for `json_object`, a value of the schema
    for `json_schema` (`demo.values`: its answer-like strings the text); the text itself for any other format."""
    kind = response_format.get("type")
    if kind == "json_object":
        return json.dumps({"answer": text}, ensure_ascii=False)
    if kind != "json_schema":
        return text
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    schema = schema if isinstance(schema, dict) else {"type": "object"}
    value = Filler(schema, text, said).fill()
    if value == {} and schema.get("additionalProperties") is not False:  # any object will do: say the answer
        value = {"answer": text}
    return json.dumps(value, ensure_ascii=False)


# -- where the demo model stops -----------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*\S+|\s+")


def tokens(text: str) -> list[str]:
    """The demo model's tokens: each word with the white space before it (joined, they are `text`)."""
    return _TOKEN.findall(text)


def cut(text: str, stop: list[str], limit: int | None) -> tuple[str, str, str | None]:
    """`text` as it comes out of a model told to stop at `stop` and after `limit` tokens: the text, the finish
    reason, and the stop sequence that ended it. Generation ends where the first stop sequence is complete (the text
    is what came before it: `stop`) or after `limit` tokens (`length`), whichever comes first."""
    pieces = tokens(text)
    shown = text if limit is None or len(pieces) <= limit else "".join(pieces[:limit])
    found = [(text.find(s) + len(s), text.find(s), s) for s in stop if s and s in text]
    if found:
        end, start, sequence = min(found)
        if end <= len(shown):
            return text[:start], "stop", sequence
    return shown, "stop" if shown == text else "length", None


def cut_calls(calls: list[dict[str, Any]], limit: int | None) -> tuple[list[dict[str, Any]], str]:
    """Tool calls as a model with a token limit makes them (their arguments one after another, cut at the limit),
    and the finish reason: `tool_calls`, or `length` when the limit cut them short."""
    kept, left = [], limit
    for call in calls:
        arguments, why, _ = cut(call["function"]["arguments"], [], left)
        if arguments:
            kept.append({**call, "function": {**call["function"], "arguments": arguments}})
        if why == "length":
            return kept, "length"
        left = None if left is None else left - len(tokens(arguments))
    return kept, "tool_calls"


# -- the demo model's parts in the advisor, panel, best-of-n, self-consistency and self-refine workflows ---------
ADVICE = "- Demo advisor: answer the last message directly, and say that an advisor's guidance was followed."
ADVISED_LEAD = "Demo model answer, written after the demo advisor's guidance (this is not a real LLM)."
PANEL_LEAD = "- The draft does not say that a panel reviewed it"
_LENS_NAMES = {lens.system_prompt: lens.name for lens in DEFAULT_LENSES}
_REPLY = re.compile(r"<reply_([AB])>\n(.*?)\n</reply_\1>", re.DOTALL)
_SEED = re.compile(r"sampled with seed (\d+)")
_RESPONSES = re.compile(r"^<response_\d+>$", re.MULTILINE)
_SUM = re.compile(r"(-?\d{1,9}(?:\.\d{1,6})?) ?([-+*/x]) ?(-?\d{1,9}(?:\.\d{1,6})?)")
FEEDBACK_LEAD = DEFAULT_FEEDBACK_SYSTEM_PROMPT.partition("{stop_phrase}")[0]  # how the feedback prompt begins
REFINE_LEAD = REFINE_INSTRUCTION.partition("{feedback}")[0]  # how a refine's last message begins
REFINED_LEAD = "Demo model, refined after its own feedback (this is not a real LLM)."
REREAD_LEAD = "Demo model answer, after reading the question twice (this is not a real LLM)."


def stage_reply(system: str, last: str) -> str | None:
    """What the demo model says as the advisor, a panel lens, the coordinator, the judge, the consistency judge or
    the feedback of self-refine (None: none of them)."""
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
        replies = dict(_REPLY.findall(last))
        a, b = seed_of(replies.get("A", "")), seed_of(replies.get("B", ""))
        winner = "A" if a > b else "B" if b > a else "tie"
        reason = f"Demo judge: reply A was sampled with seed {a}, reply B with seed {b}; it prefers the higher seed."
        revised = {label: "revised after" in reply for label, reply in replies.items()}
        if winner == "tie" and revised.get("A") != revised.get("B"):  # no seed between them: a reviewed reply wins
            winner = "A" if revised.get("A") else "B"
            reason = f"Demo judge: only reply {winner} was revised after a review; it prefers that one."
        return f"{reason}\nWinner: {winner}"
    if system == DEFAULT_CONSISTENCY_SYSTEM_PROMPT:
        middle = (len(_RESPONSES.findall(last)) + 1) // 2
        return (
            f"The most consistent response is Response {middle}: the demo samples differ only in the seed they were "
            "sampled with, and the demo model picks the middle one."
        )
    if system.startswith(FEEDBACK_LEAD):
        if REFINED_LEAD in last or "<reply>\nTool calls: " in last:
            return f"The reply says that the demo model refined it after its own feedback.\n\n**{STOP_PHRASE}**"
        return "- The reply does not say that it was refined after the demo model's own feedback; say so."
    return None


def advised(user_text: str) -> tuple[str, bool]:
    """The user's own text of a message the advisor's guidance was appended to, and whether it was."""
    own, found, _ = user_text.partition(GUIDANCE_OPEN)
    return (own.strip(), True) if found else (user_text, False)


def reread(user_text: str) -> tuple[str, bool]:
    """The user's own text of a message whose question re2 repeated, and whether it did."""
    own, found, _ = user_text.partition(f"\n{REREAD}")
    return (own, True) if found else (user_text, False)


def working(user_text: str, seed: Any) -> str | None:
    """A seeded sample's working of the first `a + b` (or -, *, x, /) in the user's message, its answer in
    `\\boxed{…}`. The demo model slips on seeds 1, 4, 7… (it adds the seed), so over seeds 1 to 5 the first sample
    is wrong and the majority right; None without a seed or a sum."""
    found = _SUM.search(user_text) if isinstance(seed, int) else None
    if found is None:
        return None
    a, op, b = Decimal(found.group(1)), found.group(2), Decimal(found.group(3))
    try:
        exact = a + b if op == "+" else a - b if op == "-" else a / b if op == "/" else a * b
    except (DivisionByZero, InvalidOperation):
        return None
    result = exact + seed if seed % 3 == 1 else exact
    shown = format(result.quantize(Decimal("0.000001")).normalize(), "f") if op == "/" else format(result, "f")
    return f"Working it out: {found.group(0)} = {shown}, so the answer is \\boxed{{{shown}}}."


def candidate_note(seed: Any) -> str:
    """How a demo draft shows the seed it was sampled with (best-of-n gives each candidate its own)."""
    return f"\n(Demo candidate sampled with seed {seed}.)" if isinstance(seed, int) else ""


def seed_of(reply: str) -> int:
    """The seed a demo draft says it was sampled with; 0 when it says none."""
    found = _SEED.search(reply)
    return int(found.group(1)) if found else 0
