"""Reading chain-of-verification's plan: the questions of a numbered (or bulleted) list in the forms models write
it, at most the limit, each once, in order — and never anything but clean one-line questions, whatever the reply."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter_critic.workflows.verification import parse_questions


@pytest.mark.parametrize(
    ("reply", "questions"),
    [
        ("1. Who designed it?\n2. When did it open?", ["Who designed it?", "When did it open?"]),
        (
            "Here are my questions:\n\n1) Who designed it?\n2) When did it open?\n\nDone.",
            ["Who designed it?", "When did it open?"],
        ),
        ("(1) Who designed it?\n(2) When did it open?", ["Who designed it?", "When did it open?"]),
        ("Q1: Who designed it?\nQuestion 2. When did it open?", ["Who designed it?", "When did it open?"]),
        ("**1.** Who designed it?\n**2. When did it open?**", ["Who designed it?", "When did it open?"]),
        (
            "- Question: Who designed it?\n* Verification question: When did it open?",
            ["Who designed it?", "When did it open?"],
        ),
        ("  1. Who designed it?\n  2. Who designed it?", ["Who designed it?"]),  # each once
        ("1. WHO designed it?\n2. who designed it?", ["WHO designed it?"]),  # in any case
        # A claim with its question under it: only the questions.
        (
            "1. Claim: it opened in 1889.\n   - When did it open?\n2. Claim: Eiffel.\n   - Who designed it?",
            ["When did it open?", "Who designed it?"],
        ),
        # No list at all: the lines that are questions.
        (
            "I would check who designed it.\nWho designed it?\nWhen did it open?",
            ["Who designed it?", "When did it open?"],
        ),
        ("1. Check the designer\n2. Check the date", ["Check the designer", "Check the date"]),
        ("1. `len()` returns what?", ["`len()` returns what?"]),
        ("12 apples were counted.\n2023 was a year.", []),
        ("The draft is fine.", []),
        ("", []),
    ],
)
def test_plans_are_read_tolerantly(reply: str, questions: list[str]) -> None:
    assert parse_questions(reply, 10) == questions


def test_at_most_the_limit_is_kept_in_order() -> None:
    reply = "\n".join(f"{i}. Question number {i}?" for i in range(1, 9))
    assert parse_questions(reply, 3) == ["Question number 1?", "Question number 2?", "Question number 3?"]


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'(),-", min_size=1, max_size=12)
QUESTION = st.lists(_WORD, min_size=1, max_size=8).map(lambda words: " ".join(words) + "?")
STYLES = ["{i}. {q}", "{i}) {q}", "({i}) {q}", "Q{i}: {q}", "**{i}.** {q}", "- {q}", "* Question: {q}"]


@given(st.lists(QUESTION, min_size=1, max_size=12), st.sampled_from(STYLES), st.integers(1, 16))
def test_a_listed_question_reads_back_as_written(questions: list[str], style: str, limit: int) -> None:
    reply = "Verification questions:\n" + "\n".join(style.format(i=i, q=q) for i, q in enumerate(questions, 1))
    once = [q for i, q in enumerate(questions) if q.casefold() not in {p.casefold() for p in questions[:i]}]
    assert parse_questions(reply, limit) == once[:limit]


@given(st.text(max_size=2000), st.integers(1, 16))
def test_any_reply_gives_at_most_limit_clean_distinct_questions(reply: str, limit: int) -> None:
    questions = parse_questions(reply, limit)
    assert len(questions) <= limit
    assert all(q and q == q.strip() and "\n" not in q and "\r" not in q for q in questions)
    assert len({q.casefold() for q in questions}) == len(questions)
