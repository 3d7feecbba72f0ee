"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the router knows of a request: its last user message's length and features (numbers, code, choices, tools, a
language other than English), and its class — the first operator-named class whose conditions hold, else one made
from the features (`numbers-short`, `code-long`, `text-medium`). Computed on the first 4,000 characters of that
message, in some 30 µs of CPU for a long one (`python -m benchmarks.router`); an operator class's pattern is searched
in the same characters, at its own cost.

The features take as few passes of the regular expression engine over those characters as they can (the engine tries
a pattern at every position unless it starts with a literal): a line's start (`^`) is looked for as a newline in the
text with one put before it, which finds the same matches, and a text in ASCII or Latin-1 is read with string and
bytes methods; tests/routing/test_features.py holds them to the plain expressions.
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
_LETTER = re.compile(r"[^\W\d_]")
_DIGITS = "".join(c for c in map(chr, range(256)) if _NUMBER.match(c))  # in Latin-1 (so ASCII): 0-9
# Code: a fence, a line that starts with a keyword, or a line that ends in ; { or }.
_FENCE = "```"
_CODE_LINE = re.compile(r"\n\s*(?:def |class |import |#include|function |public |fn )")
_CODE_ENDS = tuple((end, re.compile(re.escape(end) + r"\s*$", re.MULTILINE)) for end in ";{}")
# Choices: lines that start like `A)`, `(b)`, `c.`, `- `, `* `.
_CHOICES = re.compile(r"\n\s*(?:\(?[A-Da-d][).:]|[-*] )\s*\S")
# What is not a word character (`\w`) or is `_` or ASCII: removed, it leaves a text's letters and digits that are not
# ASCII.
_NOT_OTHER_WORD = re.compile(r"[\W_\x00-\x7f]+")
# Bytes of a Latin-1 text that are not its letters that are ASCII (A-Z, a-z), and that are not its other letters.
_NOT_ASCII_LETTERS = bytes(b for b in range(256) if b >= 128 or not _LETTER.match(chr(b)))
_NOT_OTHER_LETTERS = bytes(b for b in range(256) if b < 128 or not _LETTER.match(chr(b)))


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
    if head.isascii():
        numbers, other_language = any(digit in head for digit in _DIGITS), False
    else:
        numbers, other_language = _not_ascii(head)
    lines = "\n" + head  # a line's start is after a newline
    return Features(
        chars=len(text),
        numbers=numbers,
        code=_code(lines),
        choices=_choices(lines),
        tools=tools,
        other_language=other_language,
    )


def _code(lines: str) -> bool:
    """Whether `lines` (the text after a newline) has a code fence, a line starting with a keyword, or a line ending
    in `;`, `{` or `}`."""
    if _FENCE in lines or _CODE_LINE.search(lines) is not None:
        return True
    return any(end in lines and pattern.search(lines) is not None for end, pattern in _CODE_ENDS)


def _choices(lines: str) -> bool:
    """Whether at least two lines of `lines` (the text after a newline) start like a choice."""
    found = _CHOICES.finditer(lines)
    return next(found, None) is not None and next(found, None) is not None


def _not_ascii(head: str) -> tuple[bool, bool]:
    r"""Whether `head`, a text not in plain ASCII, has a digit (`\d`: of any script), and whether most of its letters
    (`[^\W\d_]`) are not ASCII (another script, or a language written with many accents)."""
    try:
        latin = head.encode("latin-1")  # most texts with accents, and no digit but 0-9
    except UnicodeEncodeError:
        return _not_latin(head)
    numbers = any(digit in head for digit in _DIGITS)
    other = len(latin.translate(None, _NOT_OTHER_LETTERS))
    return numbers, other > 0 and other * 3 > other + len(latin.translate(None, _NOT_ASCII_LETTERS))


def _not_latin(head: str) -> tuple[bool, bool]:
    """`_not_ascii` of a text with characters beyond Latin-1 (a typographic quote or dash, another script)."""
    other_words = _NOT_OTHER_WORD.sub("", head)  # its letters and digits that are not ASCII
    other_digits = len(_NUMBER.findall(other_words)) if other_words else 0
    numbers = other_digits > 0 or any(digit in head for digit in _DIGITS)
    other = len(other_words) - other_digits
    if not other:  # English with a typographic quote or dash: no letter that is not ASCII
        return numbers, False
    letters = other + len(head.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTERS))
    return numbers, other * 3 > letters


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
