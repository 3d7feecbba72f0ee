"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the router knows of a request: its last user message's length and features (numbers, code, choices, tools, a
language other than English), and its class — the first operator-named class whose conditions hold, else one made
from the features (`numbers-short`, `code-long`, `text-medium`). Computed on the first 4,000 characters of that
message: a few microseconds per request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..config.routing import RequestClass
from ..core import Message

SCANNED = 4000  # characters of the last user message the features look at
SHORT, LONG = 200, 2000  # characters: below SHORT a message is short, from LONG on long

_NUMBER = re.compile(r"\d")
_CODE = re.compile(r"```|^\s*(?:def |class |import |#include|function |public |fn )|[;{}]\s*$", re.MULTILINE)
_CHOICES = re.compile(r"^\s*(?:\(?[A-Da-d][).:]|[-*] )\s*\S", re.MULTILINE)
_WORDS = re.compile(r"[^\W\d_]+")


class Features(NamedTuple):
    """A request's features (a tuple: made for every routed request)."""

    chars: int
    numbers: bool
    code: bool
    choices: bool
    tools: bool
    other_language: bool

    def names(self) -> list[str]:
        """The features it has, by name."""
        return [name for name in ("numbers", "code", "choices", "tools", "other_language") if getattr(self, name)]


def last_user_text(messages: Sequence[Message] | Sequence[Any]) -> str:
    """The text of the last user message (its text parts joined), or "": of a request's messages, or of messages as
    JSON objects (a dataset's, a stored run's)."""
    for message in reversed(messages):
        if isinstance(message, Message):
            if message.role == "user":
                return _text(message.content)
        elif isinstance(message, dict) and message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def request_class(messages: Sequence[Any], tools: bool, classes: Sequence[RequestClass]) -> str:
    """The class of a request with `messages` (JSON objects), as the router would give it."""
    text = last_user_text(messages)
    return class_of(features_of(text, tools), text, classes)


def _text(content: str | list[Any] | None) -> str:
    if isinstance(content, str):
        return content
    if not content:
        return ""
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")


def features_of(text: str, tools: bool) -> Features:
    """The features of a request whose last user message is `text` (`tools`: whether it offers tools)."""
    head = text[:SCANNED]
    return Features(
        chars=len(text),
        numbers=_NUMBER.search(head) is not None,
        code=_CODE.search(head) is not None,
        choices=len(_CHOICES.findall(head)) >= 2,
        tools=tools,
        other_language=not head.isascii() and _mostly_other(head),
    )


def _mostly_other(text: str) -> bool:
    """Whether most letters are not ASCII (another script, or a language written with many accents)."""
    letters = "".join(_WORDS.findall(text))
    return bool(letters) and sum(1 for c in letters if not c.isascii()) * 3 > len(letters)


def class_of(features: Features, text: str, classes: Sequence[RequestClass]) -> str:
    """The request's class: the first of `classes` whose conditions hold, else made from its features."""
    for kind in classes:
        if kind.min_chars is not None and features.chars < kind.min_chars:
            continue
        if kind.max_chars is not None and features.chars > kind.max_chars:
            continue
        if any(not getattr(features, name) for name in kind.features):
            continue
        if kind.pattern is not None and re.search(kind.pattern, text[:SCANNED]) is None:
            continue
        return kind.name
    return default_class(features)


def default_class(features: Features) -> str:
    """`<kind>-<length>`: the kind the first feature it has of tools, code, choices, numbers (else `text`), the
    length `short` (under 200 characters), `medium` or `long` (2,000 or more)."""
    kind = next((n for n in ("tools", "code", "choices", "numbers") if getattr(features, n)), "text")
    length = "short" if features.chars < SHORT else "long" if features.chars >= LONG else "medium"
    return f"{kind}-{length}"
