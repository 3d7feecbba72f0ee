"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`critic`: an API draft, a critique of it, then the API model's second pass (docs/guides/workflows.md).

The second pass never appends a `system` message after the conversation (that breaks the chat templates of
many local models): the critique goes in a final `user` message instead.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..core import FinalCall
from .base import PerRequest, RunContext, Workflow, first_draft
from .prompts import DEFAULT_CRITIC_SYSTEM_PROMPT, critic_messages, draft_as_text, second_pass_messages


class CriticSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    critic_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the critic's system prompt; not set: the built-in one."""


class Critic(Workflow):
    name = "critic"
    stages = ("api_draft", "critic", "api_final")
    targets = ("critic",)
    Settings = CriticSettings
    reviews_draft = True

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: CriticSettings = run.plan.settings
        target = run.plan.target("critic")
        draft = await first_draft(run)
        draft_text = draft_as_text(draft.content, draft.tool_calls)

        prompt = settings.critic_system_prompt or DEFAULT_CRITIC_SYSTEM_PROMPT
        messages = critic_messages(prompt, run.request.messages, draft_text)
        critique = await run.review_call("critic", target, messages)
        if critique is None:
            return None  # degraded: the draft stands
        run.note("critic", critique.content or "")
        second = second_pass_messages(run.request.raw_messages, draft_text, critique.content or "")
        return run.final("api_final", second)
