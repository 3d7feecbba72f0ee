"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`advisor`: an advisor writes guidance for the answer first, then the API model answers with it
(docs/guides/workflows.md).

The advisor sees the whole conversation with its own system prompt and none of the request's options (no tools:
it answers in text). Its guidance is appended to the last user message in a delimited block, and the API model
answers with the request's options, tools included; that call is the client's answer, streamed live to a
streaming client. A failed advisor degrades to a plain API answer.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..core import FinalCall
from .advice import DEFAULT_ADVISOR_SYSTEM_PROMPT, advisor_messages, with_guidance
from .base import PerRequest, RunContext, Workflow


class AdvisorSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    advisor_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the advisor's system prompt; not set: the built-in one."""


class Advisor(Workflow):
    name = "advisor"
    stages = ("advisor", "api")
    targets = ("advisor",)
    Settings = AdvisorSettings

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: AdvisorSettings = run.plan.settings
        prompt = settings.advisor_system_prompt or DEFAULT_ADVISOR_SYSTEM_PROMPT
        messages = advisor_messages(prompt, run.request.messages)
        advice = await run.review_call("advisor", run.plan.target("advisor"), messages)
        if advice is None:  # degraded (`advisor_error`): a plain answer of the API model
            return run.final("api", run.request.messages_json, first=True)
        guidance = advice.content or ""
        run.note("advisor", guidance)
        if not guidance.strip():
            return run.final("api", run.request.messages_json, first=True)
        return run.final("api", with_guidance(run.request.raw_messages, run.request.messages, guidance), first=True)
