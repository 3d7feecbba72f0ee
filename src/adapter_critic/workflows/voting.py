"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Self-consistency's extraction and vote: the final answer read from a sample's text, normalised so that equal
answers compare equal, and the majority of them (docs/guides/workflows.md).

Extractors (`extract = "…"`): `last_number` (the last number in the text), `boxed` (the last `\\boxed{…}`),
`choice` (a multiple-choice letter A to E), `regex:PATTERN` (the last match: its first group, or the whole match
when it has none) and `json:PATH` (a dot path into the JSON the text holds: `answer`, `result.items.0`).

Answers are normalised before they are compared: a number as its plain decimal value (`1,000`, `1000` and
`1000.0` are all `1000`), text stripped of surrounding markup and folded to one case with its whitespace collapsed,
JSON objects and arrays as compact JSON with sorted keys. Every pattern here is read in linear time (no nested
repetitions), since a sample can be long.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import AdapterCriticError

Extractor = Callable[[str], str | None]

EXTRACTORS = ("last_number", "boxed", "choice", "regex:PATTERN", "json:PATH")

# A number as written in prose: an optional minus (not one joining a range such as 3-5), thousands groups or plain
# digits, an optional fraction and exponent.
_NUMBER = re.compile(r"(?:(?<![\w)\].])-)?(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d{1,4})?")
_NUMBER_ONLY = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d{1,4})?|[-+]?\.\d+")
_BOXED = "\\boxed{"
# A choice: after a word that announces it (`Answer: (B)`, `the correct option is **C**`), else in parentheses.
_CHOICE_SAID = re.compile(
    r"(?i:answer|choice|option)(?:\s{1,3}(?i:is|would\s{1,3}be|:))?[\s:*_`\"'(\[]{0,8}([A-E])(?![\w])"
)
_CHOICE_PAREN = re.compile(r"\(([A-E])\)")
_CHOICE_ONLY = re.compile(r"[\s*_`\"'(\[]{0,8}([A-E])[\s*_`\"'.)\]:]{0,8}")
_FENCED_JSON = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)
_DECORATION = "*_`\"' \t\n$"
_MAX_EXPONENT = 50  # beyond it, a normalised number keeps its exponent (no megabyte of zeros from `1e9999`)


class ExtractError(AdapterCriticError, ValueError):
    """An `extract` setting that names no extractor, or a pattern or path that cannot be used."""


def extractor(spec: str) -> Extractor:
    """The extractor an `extract` setting names (ExtractError if it names none)."""
    if spec == "last_number":
        return last_number
    if spec == "boxed":
        return boxed
    if spec == "choice":
        return choice
    if spec.startswith("regex:"):
        return _regex(spec.partition(":")[2])
    if spec.startswith("json:"):
        return _json_path(spec.partition(":")[2])
    raise ExtractError(f"unknown extractor {spec!r}; use one of: {', '.join(EXTRACTORS)}")


def last_number(text: str) -> str | None:
    """The last number in `text`, normalised."""
    found = _last(_NUMBER.finditer(text))
    return normalise_number(found.group(0)) if found is not None else None


def boxed(text: str) -> str | None:
    """The content of the last `\\boxed{…}` (braces inside it balanced), normalised; None when it never closes."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, begin = 1, start + len(_BOXED)
    for at in range(begin, len(text)):
        if text[at] == "{":
            depth += 1
        elif text[at] == "}":
            depth -= 1
            if depth == 0:
                return normalise(text[begin:at])
    return None


def choice(text: str) -> str | None:
    """A multiple-choice letter (A to E): the last one announced (`Answer: B`), else the last in parentheses, else a
    reply that is only the letter."""
    for pattern in (_CHOICE_SAID, _CHOICE_PAREN):
        found = pattern.findall(text)
        if found:
            return str(found[-1])
    only = _CHOICE_ONLY.fullmatch(text)
    return only.group(1) if only else None


def normalise(answer: str) -> str | None:
    """An extracted answer as it is compared: a number's plain value, else the text without surrounding markup,
    in one case, its whitespace collapsed (None when nothing is left)."""
    stripped = answer.strip(_DECORATION).removesuffix(".").strip(_DECORATION)
    number = normalise_number(stripped)
    if number is not None:
        return number
    text = " ".join(stripped.split()).casefold()
    return text or None


def normalise_number(text: str) -> str | None:
    """A number's plain decimal value (`1,000.0` → `1000`, `-0` → `0`, `.5` → `0.5`), None if `text` is not one."""
    if not _NUMBER_ONLY.fullmatch(text):
        return None
    try:
        value = Decimal(text.replace(",", "")).normalize()
    except InvalidOperation:
        return None
    if value.is_zero():
        return "0"
    return format(value, "f") if abs(value.adjusted()) <= _MAX_EXPONENT else str(value)


def _regex(pattern: str) -> Extractor:
    if not pattern:
        raise ExtractError("regex: needs a pattern, as in regex:Answer: (\\w+)")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ExtractError(f"regex:{pattern}: not a valid regular expression ({exc})") from None

    def extract(text: str) -> str | None:
        found = _last(compiled.finditer(text))
        if found is None:
            return None
        value = found.group(1) if compiled.groups else found.group(0)
        return normalise(value) if value is not None else None

    return extract


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    last = deque(matches, maxlen=1)
    return last[0] if last else None


def _json_path(path: str) -> Extractor:
    steps = path.split(".")
    if not path or not all(steps):
        raise ExtractError(f"json:{path}: needs a dot path of keys or list indices, as in json:answer or json:a.0.b")

    def extract(text: str) -> str | None:
        value = json_value(text)
        for step in steps:
            if isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
                value = value[int(step)]
            else:
                return None
        return _normalise_json(value)

    return extract


def json_value(text: str) -> Any:
    """The JSON a sample holds: the whole text, else its last fenced block, else from its first `{` or `[` to its
    last `}` or `]` (None when none of them is JSON)."""
    fenced = _FENCED_JSON.findall(text)
    outer = [text[text.find(o) : text.rfind(c) + 1] for o, c in ("{}", "[]") if o in text and c in text]
    for candidate in (text, *fenced[-1:], *outer):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return None


def _normalise_json(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return normalise_number(repr(value)) or repr(value)  # nan and infinity keep their own names
    if isinstance(value, str):
        return normalise(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Tally:
    """The vote: each answer's count, in the order the answers first appear, and the sample chosen."""

    votes: dict[str, int]
    chosen: int | None  # the first sample that gave the winning answer; None when no sample gave an answer
    tie: bool  # the winning answer shares its count with another (the earliest of them won)


def tally(answers: Sequence[str | None]) -> Tally:
    """The majority of `answers` (None: a sample with no answer, which does not vote). Ties go to the answer that
    appears first; the chosen sample is the first that gave the winning answer."""
    votes: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, answer in enumerate(answers):
        if answer is not None:
            votes[answer] = votes.get(answer, 0) + 1
            first.setdefault(answer, index)
    if not votes:
        return Tally({}, None, False)
    top = max(votes.values())
    winner = next(answer for answer, count in votes.items() if count == top)  # dicts keep first appearance
    return Tally(votes, first[winner], sum(count == top for count in votes.values()) > 1)
