"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The demo model's part in learning (docs/guides/learning.md), deterministic so the guide's example shows a change:
as the learner, it turns each corrected answer it is shown into the lesson "End the answer with: <its last line>";
as the critic, it repeats its lessons in its critique; revising after such a critique, it ends its answer as each
lesson says.
"""

from __future__ import annotations

from ..learning.distill import FEEDBACK_LEAD, LEARNER_SYSTEM_PROMPT
from ..workflows.prompts import LESSONS_LEAD

ENDING = "End the answer with: "
CORRECTED = "Corrected answer: "
_LEARNER_LEAD = LEARNER_SYSTEM_PROMPT.partition("{")[0][:40]
_LEADS = ("Question: ", "Answer: ", "Comment (", "Scored ", "The ", CORRECTED)


def split_lessons(system: str) -> tuple[str, list[str]]:
    """A reviewer's system prompt without its lessons, and the lessons."""
    base, found, block = system.partition("\n\n" + LESSONS_LEAD)
    if not found:
        return system, []
    return base, [line[2:] for line in block.splitlines() if line.startswith("- ")]


def learnt(system: str, last: str) -> str | None:
    """The demo learner's reply: a lesson per distinct last line of the corrected answers shown (None: not asked)."""
    if not system.startswith(_LEARNER_LEAD):
        return None
    shown = last.partition(FEEDBACK_LEAD)[2]
    endings: list[str] = []
    correction: list[str] | None = None
    for line in [*shown.splitlines(), ""]:
        if line.startswith(CORRECTED) or correction is None or not line.strip() or line.startswith(_LEADS):
            if correction:
                ending = next((text for text in reversed(correction) if text.strip()), "")
                if ending and ending not in endings:
                    endings.append(ending.strip())
            correction = [line.removeprefix(CORRECTED)] if line.startswith(CORRECTED) else None
        else:
            correction.append(line)
    return "\n".join(f"- {ENDING}{ending}" for ending in endings) or "- Keep the answer short."


def endings(critique: str) -> str:
    """What a revision adds for the lessons a critique repeats: each lesson's ending, on a line of its own."""
    found = [line.partition(ENDING)[2].strip() for line in critique.splitlines() if ENDING in line]
    return "".join(f"\n{ending}" for ending in found if ending)
