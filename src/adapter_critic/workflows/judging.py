"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Best-of-n's judge: its prompts, the messages of each comparison or scoring, and reading its verdicts.

Judges are models: their replies are parsed tolerantly (the last `Winner: A` / `Score: 7` line, in any case,
with markdown around it, or a reply that is only the letter or the number). A reply that says neither is
`None` (the workflow asks once more, then counts it as a tie).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from ..core import Message
from .prompts import reviewer_messages, shown_conversation, tagged

Vote = Literal["A", "B", "tie"]

DEFAULT_PAIRWISE_SYSTEM_PROMPT = """\
You are an impartial judge of two candidate replies, A and B, of an AI assistant to the last message of a \
conversation. Decide which reply serves the user better: correct, complete, following every instruction, \
clear. Ignore the order in which they are shown and their length as such.

Give your reason in one or two sentences, then end with a last line that is exactly one of:

Winner: A
Winner: B
Winner: tie\
"""

DEFAULT_POINTWISE_SYSTEM_PROMPT = """\
You are an impartial judge of a candidate reply of an AI assistant to the last message of a conversation. \
Score how well it serves the user, from 0 (useless or wrong) to 10 (correct, complete, following every \
instruction, clear).

Give your reason in one or two sentences, then end with a last line of the form:

Score: 7\
"""

RETRY_INSTRUCTION = "Your reply did not end with the verdict line. Reply again, ending with the line {form}."

# Each pattern has one bounded run of separators (whitespace, `:`, markdown) between its parts, so that reading a
# long or hostile reply stays linear in its length (no nested or adjacent repetitions to backtrack through).
_SEP = r"[\s:=\-*_`\"'\[(]"
_WINNER = re.compile(
    rf"(?:winner|verdict|better(?:\s{{1,3}}reply)?|choice|answer)(?:\s{{1,3}}is)?{_SEP}{{0,12}}"
    rf"(?:(?:reply|candidate|response|option)[\s*_`\"'\[(]{{0,6}})?(A|B|tie)\b",
    re.IGNORECASE,
)
_SCORE = re.compile(rf"score(?:\s{{1,3}}is)?{_SEP}{{0,12}}(\d{{1,3}}(?:\.\d{{1,3}})?)", re.IGNORECASE)
_OUT_OF_TEN = re.compile(r"(\d{1,3}(?:\.\d{1,3})?) ?/ ?10\b")
_BARE = re.compile(
    r"^[*_`\"'\[(]{0,4}(?:(?:reply|candidate|response) )?(A|B|tie|\d{1,3}(?:\.\d{1,3})?)[*_`\"'\])!.]{0,4}$", re.I
)


def pairwise_messages(system_prompt: str, messages: list[Message], first: str, second: str) -> list[dict[str, Any]]:
    """A comparison as the judge sees it: `first` shown as A, `second` as B."""
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        tagged("reply_A", first),
        tagged("reply_B", second),
        "Which reply is better? End with `Winner: A`, `Winner: B` or `Winner: tie`.",
    )


def pointwise_messages(system_prompt: str, messages: list[Message], candidate: str) -> list[dict[str, Any]]:
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        tagged("reply", candidate),
        "Score the reply from 0 to 10. End with `Score: N`.",
    )


def retry_messages(previous: list[dict[str, Any]], reply: str, pairwise: bool) -> list[dict[str, Any]]:
    """The judge asked once more, told what was missing from its `reply`."""
    form = "`Winner: A`, `Winner: B` or `Winner: tie`" if pairwise else "`Score: N` (N from 0 to 10)"
    retry = {"role": "user", "content": RETRY_INSTRUCTION.format(form=form)}
    return [*previous, {"role": "assistant", "content": reply}, retry]


def parse_vote(reply: str) -> Vote | None:
    """The judge's vote (`A`, `B` or `tie`), or None when the reply gives none."""
    found = _WINNER.findall(reply)
    token = found[-1] if found else _bare(reply)
    if token is None:
        return None
    token = token.upper()
    if token == "TIE":
        return "tie"
    return "A" if token == "A" else "B" if token == "B" else None


def parse_score(reply: str) -> float | None:
    """The judge's score from 0 to 10, or None when the reply gives none (or one out of range)."""
    found = _SCORE.findall(reply) or _OUT_OF_TEN.findall(reply)
    token = found[-1] if found else _bare(reply)
    try:
        score = float(token) if token is not None else None
    except ValueError:
        return None
    return score if score is not None and 0 <= score <= 10 else None


def reason_of(reply: str) -> str:
    """The judge's reason: its reply without the verdict line."""
    lines = [line for line in reply.strip().splitlines() if not _WINNER.search(line) and not _SCORE.search(line)]
    return "\n".join(lines).strip()


def _bare(reply: str) -> str | None:
    match = _BARE.match(reply.strip())
    return match.group(1) if match else None
