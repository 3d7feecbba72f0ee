"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`chain_of_verification`: a baseline answer, a plan of verification questions about its claims, each question
answered on its own and all at once, then the API model's final answer revised where the answers disagree with the
baseline (Dhuliawala et al., 2023, "Chain-of-Verification Reduces Hallucination in Large Language Models", its
"factored" variant; docs/guides/workflows.md).

The verification questions are answered without the baseline in their context — the point of the method: a model
that sees its own answer tends to repeat its mistakes — and, unless `verify_with_conversation`, without the
conversation either. The plan and the answers are the `verifier` target's (else `api`'s), reviewer calls without
the request's options; the baseline and the final answer are the API model's, with them, the final one streamed
live to a streaming client.

A failed plan (or one without a question) leaves the baseline; a failed verification question is left out, and
when every one fails the baseline stands. A baseline that calls tools stands as it is: what is to be verified is
the answer the model writes once the tools have answered.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..core import Completion, FinalCall
from .base import PerRequest, RunContext, StageCall, StageFailed, Workflow, first_draft
from .prompts import revision_messages
from .verification import (
    DEFAULT_PLAN_SYSTEM_PROMPT,
    DEFAULT_VERIFY_SYSTEM_PROMPT,
    VERIFIED_INSTRUCTION,
    checks_text,
    parse_questions,
    plan_messages,
    verify_messages,
)


class ChainOfVerificationSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 8 questions from a request (16 from the config): each is a call the operator pays for.
    max_questions: Annotated[int, msgspec.Meta(ge=1, le=16), PerRequest(cap=8)] = 5
    """The most verification questions asked (all at once): the plan is asked for at most this many, and any
    beyond them are dropped."""
    plan_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the planner's system prompt; not set: the built-in one. Its reply is read as a numbered list."""
    verify_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the system prompt each verification question is asked with; not set: the built-in one."""
    verify_with_conversation: Annotated[bool, PerRequest()] = False
    """`true`: each verification question is asked after the conversation (never the baseline answer), for
    questions about a document or data the user gave; `false`: the question alone, as in the paper."""


class ChainOfVerification(Workflow):
    name = "chain_of_verification"
    stages = ("baseline", "plan", "verify:<i>", "final")
    targets = ("verifier",)
    Settings = ChainOfVerificationSettings
    reviews_draft = True
    aliases = ("cove",)

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: ChainOfVerificationSettings = run.plan.settings
        request, verifier = run.request, run.plan.target("verifier")
        baseline = await first_draft(run, "baseline", "baseline")
        draft = baseline.content or ""
        if baseline.tool_calls or not draft.strip():
            return None  # a tool call (or nothing) to verify: the baseline stands

        prompt = settings.plan_system_prompt or DEFAULT_PLAN_SYSTEM_PROMPT
        plan = await run.review_call(
            "plan", verifier, plan_messages(prompt, request.messages, draft, settings.max_questions)
        )
        if plan is None:
            return None  # degraded (`plan_error`): the baseline stands
        run.note("plan", plan.content or "")
        questions = parse_questions(plan.content or "", settings.max_questions)
        run.note("questions", questions)
        if not questions:
            return None

        system = settings.verify_system_prompt or DEFAULT_VERIFY_SYSTEM_PROMPT
        conversation = request.messages if settings.verify_with_conversation else None
        calls = [
            StageCall(f"verify:{i}", verifier, verify_messages(system, question, conversation))
            for i, question in enumerate(questions, 1)
        ]
        results = await run.review_calls(calls)
        answered = [(q, r.content or "") for q, r in zip(questions, results, strict=True) if isinstance(r, Completion)]
        run.note("verifications", [{"question": q, "answer": a} for q, a in answered])
        errors = {r.stage: r.reason for r in results if isinstance(r, StageFailed)}
        if errors:
            run.note("verify_errors", errors)
        checks = [(q, a) for q, a in answered if a.strip()]
        if not checks:
            return None  # nothing came back to check the baseline with: it stands
        instruction = VERIFIED_INSTRUCTION.format(checks=checks_text(checks))
        return run.final("final", revision_messages(request.raw_messages, draft, instruction))
