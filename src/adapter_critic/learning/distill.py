"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Distilling feedback into lessons: what users said of a served model's runs — critiques they rejected or accepted,
answers they corrected, low scores and their comments — shown to the learner (a served model of the config) with
the lessons in use, and its reply read as a bounded list of short lessons for the reviewers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..store.records import RunDetail

LEARNER_SYSTEM_PROMPT = """\
You improve the reviewers of an AI assistant. You are shown what users said about the assistant's recent answers: \
critiques they rejected or accepted, answers they corrected, low scores and their comments, and the lessons the \
reviewers follow now. Write the lessons the reviewers should follow from now on: short, general, each on its own \
line starting with "- ", at most {most}. Keep a lesson in use that still holds; drop one the feedback contradicts.\
"""
FEEDBACK_LEAD = "Feedback on recent answers:"
MAX_SHOWN = 2_000  # characters of one text shown to the learner
_LESSON = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+(.+?)\s*$")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + " […]"


def digest(runs: Sequence[RunDetail]) -> list[str]:
    """What the learner is shown of each run with feedback: its question, its answer, and what users said."""
    shown: list[str] = []
    for run in runs:
        said: list[str] = []
        outputs = {stage.index: stage.output for stage in run.stages}
        for entry in run.feedback:
            if entry.verdict is not None and entry.stage is not None:
                output = outputs.get(entry.stage_index) if entry.stage_index is not None else None
                what = f"The {entry.stage} stage's output was {entry.verdict}ed"
                said.append(f"{what}: {_cut(str(output))}" if output else what)
            if entry.corrected_answer:
                said.append(f"Corrected answer: {_cut(entry.corrected_answer)}")
            if entry.comment:
                said.append(f"Comment (score {entry.score:g}): {_cut(entry.comment)}")
            elif entry.score < 0:
                said.append(f"Scored {entry.score:g}")
        if not said:
            continue
        messages = (run.request.messages if run.request is not None else None) or []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        question = str(users[-1].get("content")) if users else "(not kept)"
        answer = run.answer.content if run.answer is not None and run.answer.content else "(none)"
        shown.append("\n".join([f"Question: {_cut(question)}", f"Answer: {_cut(answer)}", *said]))
    return shown


def learner_messages(shown: Sequence[str], lessons: Sequence[str], most: int) -> list[dict[str, str]]:
    current = "\n".join(f"- {lesson}" for lesson in lessons) or "(none yet)"
    body = f"Lessons in use:\n{current}\n\n{FEEDBACK_LEAD}\n\n" + "\n\n".join(shown)
    return [
        {"role": "system", "content": LEARNER_SYSTEM_PROMPT.format(most=most)},
        {"role": "user", "content": body},
    ]


def read_lessons(reply: str) -> list[str]:
    """The lessons in the learner's reply: its lines that are list items."""
    return [found.group(1) for line in reply.splitlines() if (found := _LESSON.match(line))]
