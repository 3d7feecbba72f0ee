"""A request's features read the fast way (`routing.features.features_of`) are those the plain regular expressions
below give: every feature, on texts of lines, keywords, choices, digits of several scripts, accents and other
scripts, Unicode whitespace and lone surrogates, and longer than the characters scanned."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapter_critic.routing.features import SCANNED, Features, features_of

_NUMBER = re.compile(r"\d")
_CODE = re.compile(r"```|^\s*(?:def |class |import |#include|function |public |fn )|[;{}]\s*$", re.MULTILINE)
_CHOICES = re.compile(r"^\s*(?:\(?[A-Da-d][).:]|[-*] )\s*\S", re.MULTILINE)
_WORDS = re.compile(r"[^\W\d_]+")


def plainly(text: str, tools: bool) -> Features:
    """The features, each as one regular expression over the scanned characters."""
    head = text[:SCANNED]
    letters = "".join(_WORDS.findall(head))
    return Features(
        chars=len(text),
        numbers=_NUMBER.search(head) is not None,
        code=_CODE.search(head) is not None,
        choices=len(_CHOICES.findall(head)) >= 2,
        tools=tools,
        other_language=not head.isascii()
        and bool(letters)
        and sum(1 for c in letters if not c.isascii()) * 3 > len(letters),
    )


PIECES = [
    "\n", "\r\n", "\n\n", " ", "  ", "\t", "\x0b", "\x0c", "\u00a0", "\u2028", "\u3000", "x", "word ", "The ", "é",
    "ça ", "Ж", "日本語", "٣", "७", "²", "½", "_", "7", "0", "def ", "class ", "import ", "#include", "function ",
    "public ", "fn ", "```", ";", "{", "}", "A)", "(b)", "c.", "D:", "e)", "- ", "* ", "-", "*", "\u2019", "\u2014",
    "\u00d7", "ª", "\u0153", "\ud800",
]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=60).map("".join)

CASES = [
    "",
    "What is the capital of France?",
    "A) one\nB) two",
    "A) one\n\n  \nB)\ttwo",
    "intro\n(a) x\n(b) y\n",
    "only one\n- item",
    "x;\n",
    "x;  \n\n",
    "x{ \u2028y",
    "x;\u00a0\ny",
    "x}\x0b",
    "  \n  def f():\n    pass",
    "text\n\x0b\ndef f",
    "text\n\u00a0def f",
    "\x0cimport os",
    "  A) yes\n  B) no",
    "\t- one\n\u3000* two",
    "Résumé du café à Noël, très élégant",
    "Он сказал: привет, мир. 3 раза",
    "المجموع ٣ و ٤",
    "x² and y½ only",
    "".join(map(chr, range(32, 256))),
    "ÀÉÎõü \u00d7÷ ª µ º « » ¹ ¼ 7",
    "Le cœur a ses raisons",
    "àéè" * 10 + "abc" * 20,
    "éé ab",
    "ééé abcd",
    "²³¹¼½¾ ab",
    "route 9",
    "route \u2019 9",
    "lone \ud800 surrogate",
    "a" * (SCANNED - 2) + "\nA) 1\nB) 2",
    "word " * 700 + "\n" + "```" + "x" * 10,
]


@settings(max_examples=400, deadline=None, database=None)
@given(texts, st.booleans())
@example("", False)
def test_features_are_those_of_the_plain_expressions(text: str, tools: bool) -> None:
    assert features_of(text, tools) == plainly(text, tools)


def test_features_of_chosen_texts() -> None:
    for text in CASES:
        for prefix in ("", "\n", "Intro: ", "x" * (SCANNED - 3)):
            assert features_of(prefix + text, False) == plainly(prefix + text, False), repr(prefix + text)
