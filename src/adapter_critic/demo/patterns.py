"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A string that matches a regular expression: what the demo model puts in a string property with a JSON-schema
`pattern` (`^\\d{5}$` gives `12345`).

The common syntax is read (literals, escapes, classes, `.`, groups, the first alternative of `|`, quantifiers,
anchors and lookarounds taken as nothing); the string made is checked against the pattern, and None is the answer
when it does not match. Patterns are compiled by `compiled`, as Python reads them today.
"""

from __future__ import annotations

import re
import string
import warnings

# What a class or `.` stands for: its first candidate here, the next one at each repetition (`\d{5}` is `12345`).
_CANDIDATES = string.ascii_lowercase + "1234567890" + string.ascii_uppercase + " -_.@/:+"
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_CLASS_ESCAPES = set("dDwWsS")
_MOST = 64  # repetitions made of one atom (`a{1000000}` gets 64: the check then fails, and there is no example)


def example(pattern: str) -> str | None:
    """A short string `pattern` matches (searched for, as JSON Schema does), or None."""
    try:
        text, _ = _Reader(pattern).alternation(0)
        return text if compiled(pattern).search(text) is not None else None
    except (re.error, IndexError, ValueError, RecursionError):
        return None


def compiled(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled as Python (and JSON Schema's ECMA-262) reads it today; `re.error` when it cannot be read.

    A class with a set syntax a later Python may read otherwise (`[[`, `--`, `&&`, `||`, `~~`) makes `re` warn
    (FutureWarning) the first time it compiles it. The pattern is the client's, not the server's to warn about,
    so the warning is silenced: the demo's answer is then the same whether `re` warned, had the pattern cached
    or runs where warnings are errors.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(pattern)


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def alternation(self, at: int) -> tuple[str, int]:
        """The first alternative's string, and where the alternation ends (at a `)` or the end)."""
        text, at = self.sequence(at)
        depth = 0
        while at < len(self.pattern) and (self.pattern[at] != ")" or depth):  # skip the other alternatives
            char = self.pattern[at]
            if char == "\\":
                at += 1
            elif char == "[":
                at = self._class_end(at)
                continue
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            at += 1
        return text, at

    def sequence(self, at: int) -> tuple[str, int]:
        out: list[str] = []
        while at < len(self.pattern) and self.pattern[at] not in "|)":
            start = at
            atom, at = self.atom(at, 0)
            low, at = self._quantifier(at)
            out.append(atom)
            for i in range(1, low):  # each repetition made again, so classes vary (`\d{3}` is `123`)
                out.append(self.atom(start, i)[0])
            if low == 0:
                out.pop()
        return "".join(out), at

    def atom(self, at: int, turn: int) -> tuple[str, int]:
        char = self.pattern[at]
        if char == "(":
            at += 1
            look = self.pattern.startswith(("?=", "?!", "?<=", "?<!"), at)
            if self.pattern.startswith("?", at):
                named = re.match(r"\?P?<(?![=!])[^>]*>|\?[:=!]|\?<[=!]|\?[a-zA-Z-]+:", self.pattern[at:])
                at += named.end() if named else 1
            text, at = self.alternation(at)
            return ("" if look else text), at + 1
        if char == "[":
            end = self._class_end(at)
            return _pick(self.pattern[at:end], turn), end
        if char == "\\":
            escaped = self.pattern[at + 1]
            if escaped in _CLASS_ESCAPES:
                return _pick(f"[\\{escaped}]", turn), at + 2
            if escaped in "bBAzZ" or (escaped.isdigit() and escaped != "0"):
                return "", at + 2  # a boundary, or a back-reference (taken as nothing)
            if escaped == "u":
                return chr(int(self.pattern[at + 2 : at + 6], 16)), at + 6
            if escaped == "x":
                return chr(int(self.pattern[at + 2 : at + 4], 16)), at + 4
            return _ESCAPES.get(escaped, escaped), at + 2
        if char == ".":
            return _pick("[^\n]", turn), at + 1
        if char in "^$":
            return "", at + 1
        return char, at + 1

    def _quantifier(self, at: int) -> tuple[int, int]:
        """The fewest repetitions the quantifier at `at` allows (1 when there is none), and where it ends."""
        found = re.match(r"[*+?]|\{(\d+)(?:,\d*)?\}", self.pattern[at:])
        if found is None:
            return 1, at
        low = min({"*": 0, "+": 1, "?": 0}.get(found.group(0), int(found.group(1) or 0)), _MOST)
        at += found.end()
        if at < len(self.pattern) and self.pattern[at] in "?+":  # lazy or possessive
            at += 1
        return low, at

    def _class_end(self, at: int) -> int:
        """Where the class opening at `at` ends (just after its `]`)."""
        at += 1
        if self.pattern.startswith("^", at):
            at += 1
        if self.pattern.startswith("]", at):
            at += 1
        while self.pattern[at] != "]":
            at += 2 if self.pattern[at] == "\\" else 1
        return at + 1


def _pick(char_class: str, turn: int) -> str:
    """The `turn`-th candidate character (counting round) that `char_class` (a `[...]` expression) matches."""
    reader = compiled(char_class)
    matching = [c for c in _CANDIDATES if reader.fullmatch(c)]
    return matching[turn % len(matching)] if matching else ""
