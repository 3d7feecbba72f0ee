"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Chain-of-verification's prompts (Dhuliawala et al., 2023), the messages of its plan, verification and final calls,
and reading the plan.

The plan is a model's reply: its questions are read tolerantly — numbered (`1.`, `2)`, `(3)`, `Q4:`, `**5.**`) or
bulleted lines, a `Question:` label dropped; when no line is numbered or bulleted, every line that ends in `?`. When
some items end in `?` and others do not (a claim, then its question), only the questions are kept. Duplicates are
dropped and at most the limit kept, in order.
"""

from __future__ import annotations

import re
from typing import Any

from ..core import Message
from .prompts import reviewer_messages, shown_conversation, tagged

DEFAULT_PLAN_SYSTEM_PROMPT = """\
You help check an AI assistant's draft reply for factual errors. You are shown the conversation and the draft \
reply to its last message. Write the verification questions whose answers would confirm or refute the draft's \
claims of fact: one question per claim, the most important claims first. Someone who has not seen the draft or the \
conversation will answer each question on its own, so make every question self-contained (name the people, \
places, things and dates it is about) and short.

Answer with a numbered list of questions and nothing else, for example:

1. In which year did the Eiffel Tower open?
2. Who designed the Eiffel Tower?\
"""

DEFAULT_VERIFY_SYSTEM_PROMPT = """\
Answer the question accurately and concisely, in one or two sentences. If you are not sure of the answer, say so \
rather than guess.\
"""

VERIFIED_LEAD = "To check your previous reply, each of these verification questions was answered on its own"
VERIFIED_INSTRUCTION = (
    VERIFIED_LEAD
    + """, by someone who did not see your reply:

{checks}

Write your final answer to my previous message. Keep what these answers confirm; where an answer contradicts your \
previous reply, correct the reply (or leave the claim out when you cannot tell which is right). Reply with the final \
answer only: no preamble, and no mention of the questions or of this check.\
"""
)


def plan_messages(system_prompt: str, messages: list[Message], draft: str, limit: int) -> list[dict[str, Any]]:
    """The planner's call: the conversation and the baseline draft, asking for at most `limit` questions."""
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        tagged("draft_reply", draft),
        f"Write at most {limit} verification questions about the draft reply's claims, as a numbered list.",
    )


def verify_messages(system_prompt: str, question: str, conversation: list[Message] | None) -> list[dict[str, Any]]:
    """One verification question, asked on its own: never with the draft it checks. `conversation` (the
    `verify_with_conversation` setting) comes before it, for questions about what the user gave."""
    if conversation is None:
        return reviewer_messages(system_prompt, question)
    return reviewer_messages(system_prompt, shown_conversation(conversation), f"Question: {question}")


def checks_text(checks: list[tuple[str, str]]) -> str:
    """The verification questions and their answers, numbered, for the final call."""
    return "\n\n".join(f"Question {i}: {q}\nAnswer: {a.strip()}" for i, (q, a) in enumerate(checks, 1))


# One line each, matched line by line: every pattern is linear in the line's length (nothing nested to backtrack).
_NUMBERED = re.compile(
    r"^[*_]{0,2}(?:q(?:uestion)?\s?\d{1,3}[.):\]]?|\(\d{1,3}\)|\d{1,3}[.):\]])[*_]{0,2}\s+(\S.*)$", re.IGNORECASE
)
_BULLETED = re.compile(r"^[-*+•]\s+(\S.*)$")
_LABEL = re.compile(r"^[*_]{0,2}(?:verification\s)?(?:question|q)[*_]{0,2}\s?:[*_]{0,2}\s*", re.IGNORECASE)
_WRAPPERS = ("**", "__", "*", "_", "`")
_CLOSING = re.compile(r"(?<=[?.!])[*_]{1,3}$")  # the closing run of emphasis whose opening the numbering took


def parse_questions(reply: str, limit: int) -> list[str]:
    """The plan's questions, in order: at most `limit`, each once (see the module's docstring)."""
    lines = [line.strip() for line in reply.splitlines()]
    items = [m.group(1) for line in lines if (m := _NUMBERED.match(line) or _BULLETED.match(line))]
    if not items:
        items = [line for line in lines if line.endswith("?")]
    cleaned = [_clean(item) for item in items]
    questions = [item for item in cleaned if item]
    if any(q.endswith("?") for q in questions):
        questions = [q for q in questions if q.endswith("?")]
    seen: set[str] = set()
    kept = []
    for question in questions:
        key = question.casefold()
        if key not in seen:
            seen.add(key)
            kept.append(question)
    return kept[:limit]


def _clean(item: str) -> str:
    """An item without a `Question:` label and the markdown emphasis around it."""
    item = _LABEL.sub("", item.strip()).strip()
    for mark in _WRAPPERS:
        if len(item) > 2 * len(mark) and item.startswith(mark) and item.endswith(mark):
            item = item[len(mark) : -len(mark)].strip()
            break
    return _CLOSING.sub("", item).strip()
