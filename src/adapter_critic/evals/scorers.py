"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Scorers: how an answer is graded, from 0 (wrong) to 1 (right).

`exact` (the answer, stripped, equals an expected string), `contains` (an expected string appears in the
answer, ignoring case), `regex:PATTERN` (the pattern is found in the answer), `json` (the answer is JSON, in a code
fence or not, and fits the item's `schema` when it has one; checked with the `jsonschema` library),
`judge:MODEL` (a served model grades the answer against `expected` or the item's `rubric`; its reply is read
tolerantly: "SCORE: 8", "8/10", "PASS"), and `module:function` (your own: `function(answer, item)` returning a number or
a bool, or a pair of a number and a note; it may be async; `item` is the dataset line as a dict).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import EvalError
from .dataset import Item

Score = tuple[float, str | None]  # the value and a note saying why, when there is something to say
Judge = Callable[[str, list[dict[str, Any]]], Awaitable[str]]  # (model, messages) -> the reply's text


class ScorerError(EvalError):
    """A scorer that cannot be used (an unknown name, a bad pattern, a function that cannot be imported)."""


class ScoreError(EvalError):
    """One answer could not be graded (the judge's reply has no score, a custom scorer raised)."""


@dataclass(frozen=True)
class Scorer:
    spec: str
    grade: Callable[[str, Item], Awaitable[Score]]
    needs: str | None = None  # what an item must carry: "expected", "expected or rubric"

    def misses(self, item: Item) -> str | None:
        """Why this scorer cannot grade `item` (checked before anything runs), or None."""
        if self.needs == "expected" and not item.expected_list():
            return f"scorer {self.spec!r} needs `expected`"
        if self.needs == "expected or rubric" and not (item.expected_list() or item.rubric):
            return f"scorer {self.spec!r} needs `expected` or `rubric`"
        return None


def make_scorer(spec: str, judge: Judge) -> Scorer:
    if spec == "exact":
        return Scorer(spec, _exact, needs="expected")
    if spec == "contains":
        return Scorer(spec, _contains, needs="expected")
    if spec == "json":
        return Scorer(spec, _json)
    if spec.startswith("regex:"):
        return Scorer(spec, _regex(spec))
    if spec.startswith("judge:"):
        model = spec.partition(":")[2]
        if not model:
            raise ScorerError("judge needs a model: judge:MODEL")
        return Scorer(spec, _judge(model, judge), needs="expected or rubric")
    if ":" in spec:
        return Scorer(spec, _custom(spec))
    raise ScorerError(
        f"unknown scorer {spec!r}; use exact, contains, regex:PATTERN, json, judge:MODEL or module:function"
    )


async def _exact(answer: str, item: Item) -> Score:
    return float(any(answer.strip() == expected.strip() for expected in item.expected_list())), None


async def _contains(answer: str, item: Item) -> Score:
    folded = answer.casefold()
    return float(any(expected.casefold() in folded for expected in item.expected_list())), None


def _regex(spec: str) -> Callable[[str, Item], Awaitable[Score]]:
    try:
        pattern = re.compile(spec.partition(":")[2])
    except re.error as exc:
        raise ScorerError(f"scorer {spec!r}: not a valid regular expression ({exc})") from None

    async def grade(answer: str, item: Item) -> Score:
        return (1.0, None) if pattern.search(answer) else (0.0, "no match")

    return grade


_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)


async def _json(answer: str, item: Item) -> Score:
    fenced = _FENCE.match(answer)
    try:
        value = json.loads(fenced.group("body") if fenced else answer)
    except ValueError as exc:
        return 0.0, f"not JSON: {exc}"
    if item.schema is None:
        return 1.0, None
    import jsonschema  # the [cli] extra

    validator = jsonschema.validators.validator_for(item.schema)(item.schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path)
        return 0.0, f"does not fit the schema{' at ' + where if where else ''}: {error.message}"
    return 1.0, None


JUDGE_SYSTEM = (
    "You grade answers. Compare the answer with the reference answer or the rubric, then reply with at most two "
    "sentences of reasoning and a final line `SCORE: N`, where N is an integer from 0 (wrong) to 10 (fully right)."
)


def judge_messages(answer: str, item: Item) -> list[dict[str, Any]]:
    asked = "\n".join(f"{m.get('role')}: {_text(m.get('content'))}" for m in item.messages)
    parts = [f"Conversation:\n{asked}"]
    if item.expected_list():
        parts.append("Reference answer(s):\n" + "\n".join(item.expected_list()))
    if item.rubric:
        parts.append(f"Rubric:\n{item.rubric}")
    parts.append(f"Answer to grade:\n{answer}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


_SCORE = re.compile(r"score\W{0,3}(-?\d+(?:\.\d+)?)(?:\s*(?:/|out of)\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)
_RATIO = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_VERDICT = re.compile(r"\b(incorrect|correct|pass(?:ed)?|fail(?:ed)?|wrong|right)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\s*\**\s*(-?\d+(?:\.\d+)?)\s*\**\s*\.?\s*")


def parse_judgement(reply: str) -> float | None:
    """A judge's reply as a score from 0 to 1: the last "SCORE: N" (of 10 unless "N/M"), else the last "N/M", else a
    reply that is only a number (of 10, or a fraction when at most 1), else the last verdict word; None if none."""
    for pattern in (_SCORE, _RATIO):
        found = pattern.findall(reply)
        if found:
            value, scale = found[-1]
            return _clamp(float(value) / float(scale or 10)) if float(scale or 10) > 0 else None
    only = _NUMBER.fullmatch(reply)
    if only:
        value = float(only.group(1))
        return _clamp(value if value <= 1 else value / 10)
    verdicts = _VERDICT.findall(reply)
    if verdicts:
        return 1.0 if verdicts[-1].lower() in ("correct", "pass", "passed", "right") else 0.0
    return None


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _judge(model: str, judge: Judge) -> Callable[[str, Item], Awaitable[Score]]:
    async def grade(answer: str, item: Item) -> Score:
        reply = await judge(model, judge_messages(answer, item))
        value = parse_judgement(reply)
        if value is None:
            raise ScoreError(f"the judge {model!r} gave no score: {' '.join(reply.split())[:120]!r}")
        return value, " ".join(reply.split())[:200]

    return grade


def _custom(spec: str) -> Callable[[str, Item], Awaitable[Score]]:
    module_name, _, name = spec.partition(":")
    if os.getcwd() not in sys.path:  # a scorer module next to the dataset, as `python -m` would find it
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ScorerError(f"scorer {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ScorerError(f"scorer {spec!r}: {module_name!r} has no function {name!r}")

    async def grade(answer: str, item: Item) -> Score:
        try:
            result = function(answer, msgspec.to_builtins(item))
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise ScoreError(f"scorer {spec!r} raised {type(exc).__name__}: {exc}") from None
        return _as_score(spec, result)

    return grade


def _as_score(spec: str, result: Any) -> Score:
    note = None
    if isinstance(result, tuple) and len(result) == 2:
        result, note = result[0], (str(result[1]) if result[1] is not None else None)
    if isinstance(result, bool | int | float):
        return float(result), note
    raise ScoreError(f"scorer {spec!r} returned {type(result).__name__}; it must return a number or a bool")
