"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`self_refine` (Madaan et al., 2023, "Self-Refine: Iterative Refinement with Self-Feedback"): the API model drafts,
then in each round a feedback call (the `feedback` target, else `api`) reviews the latest answer and the API
model refines it, up to `max_rounds` rounds; a round whose feedback says the answer needs no change (the stop
phrase, read as the adapter's `lgtm` is) ends the refining early.

As in the paper, each refine sees the history: the conversation, then every answer so far as an assistant turn and
the feedback on it as a user turn. The last round's refine is the run's final call (streamed live to a streaming
client); when the feedback stops early, the answer so far is the client's. A failed feedback or refine call leaves
the answer so far (degraded).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ..core import Answer, FinalCall, Message
from .base import PerRequest, RunContext, Workflow, first_draft
from .edits import is_only
from .prompts import draft_as_text, reviewer_messages, shown_conversation, tagged

STOP_PHRASE = "NO CHANGES NEEDED"

DEFAULT_FEEDBACK_SYSTEM_PROMPT = """\
You give feedback on an AI assistant's reply so that the assistant can improve it. You are shown the \
conversation and the assistant's latest reply to its last message. Check that the reply is correct, complete, \
follows every instruction and is clear. List each concrete problem and how to fix it, as short actionable \
points. Do not write the improved reply yourself.

If the reply needs no change at all, reply with exactly this line and nothing else:
{stop_phrase}\
"""

REFINE_INSTRUCTION = """\
Here is feedback on your previous reply:

{feedback}

Rewrite your reply to my previous message so that it addresses the feedback. Reply with the improved answer \
only: no preamble, and no mention of the feedback.\
"""


class SelfRefineSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 5 rounds from a request (10 from the config): each round is two upstream calls the operator pays for.
    max_rounds: Annotated[int, msgspec.Meta(ge=1, le=10), PerRequest(cap=5)] = 3
    """The most feedback-and-refine rounds after the draft (each two calls; the feedback can stop it earlier)."""
    stop_phrase: Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"\S"), PerRequest()] = STOP_PHRASE
    """What the feedback says when the answer needs no change (in any case and markup, alone or as its last line)."""
    feedback_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the feedback prompt; `{stop_phrase}` in it becomes the stop phrase. Not set: the built-in one."""


class SelfRefine(Workflow):
    name = "self_refine"
    stages = ("api_draft", "feedback:<r>", "refine:<r>")
    targets = ("feedback",)
    Settings = SelfRefineSettings
    reviews_draft = True

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: SelfRefineSettings = run.plan.settings
        target = run.plan.target("feedback")
        prompt = (settings.feedback_system_prompt or DEFAULT_FEEDBACK_SYSTEM_PROMPT).replace(
            "{stop_phrase}", settings.stop_phrase
        )
        draft = await first_draft(run)
        answer = draft_as_text(draft.content, draft.tool_calls)
        history: list[Any] = list(run.request.raw_messages)
        for round_ in range(1, settings.max_rounds + 1):
            messages = feedback_messages(prompt, run.request.messages, answer)
            feedback = await run.review_call(f"feedback:{round_}", target, messages)
            if feedback is None:
                return None  # degraded: the answer so far stands
            said = feedback.content or ""
            run.note(f"feedback:{round_}", said)
            if says_stop(said, settings.stop_phrase):
                run.note("stopped", round_)  # this round's feedback asked for no change: the answer so far stands
                return None
            history += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": REFINE_INSTRUCTION.format(feedback=said)},
            ]
            if round_ == settings.max_rounds:
                return run.final(f"refine:{round_}", history)
            refined = await run.review_call(f"refine:{round_}", run.plan.api, history, api=True)
            if refined is None:
                return None  # degraded: the answer so far stands
            run.set_answer(Answer.of(refined))
            answer = draft_as_text(refined.content, refined.tool_calls)
            run.note(f"refine:{round_}", refined.content or "")
        return None  # not reached: the last round returns its refine as the final call


def feedback_messages(system_prompt: str, messages: list[Message], answer: str) -> list[dict[str, Any]]:
    return reviewer_messages(
        system_prompt, shown_conversation(messages), tagged("reply", answer), "Give your feedback on the reply."
    )


def says_stop(feedback: str, stop_phrase: str) -> bool:
    """Whether the feedback says the answer needs no change: it is the stop phrase, or its last non-empty line is
    (each read as the adapter's `lgtm`: any case, with markup and a trailing `.`/`!`)."""
    if is_only(feedback, stop_phrase):
        return True
    lines = [line for line in feedback.strip().splitlines() if line.strip()]
    return len(lines) > 1 and is_only(lines[-1], stop_phrase)
