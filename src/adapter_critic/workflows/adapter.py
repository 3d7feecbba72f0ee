"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter`: an API draft, then a reviewer that answers `lgtm` or SEARCH/REPLACE edits to it
(docs/guides/workflows.md)."""

from __future__ import annotations

import logging
from typing import Annotated

import msgspec

from ..core import FinalCall
from .base import PerRequest, RunContext, Workflow, first_draft
from .edits import EditError, review
from .prompts import DEFAULT_ADAPTER_SYSTEM_PROMPT, adapter_messages, adapter_retry_messages, draft_as_text

logger = logging.getLogger("adapter_critic")


class AdapterSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    adapter_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the adapter's system prompt; not set: the built-in one."""
    # At most 5 from a request (10 from the config): each retry is an upstream call the operator pays for.
    max_adapter_retries: Annotated[int, msgspec.Meta(ge=0, le=10), PerRequest(cap=5)] = 0
    """How often an invalid adapter reply is retried, each retry telling the adapter what was wrong."""


class Adapter(Workflow):
    name = "adapter"
    stages = ("api", "adapter")
    targets = ("adapter",)
    Settings = AdapterSettings
    reviews_draft = True

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: AdapterSettings = run.plan.settings
        target = run.plan.target("adapter")
        draft = await first_draft(run, "api")
        draft_text = draft.content or ""

        prompt = settings.adapter_system_prompt or DEFAULT_ADAPTER_SYSTEM_PROMPT
        messages = adapter_messages(prompt, run.request.messages, draft_as_text(draft.content, draft.tool_calls))
        rejection: str | None = None
        for attempt in range(settings.max_adapter_retries + 1):
            completion = await run.review_call("adapter", target, messages)
            if completion is None:
                break  # degraded: the draft stands, and the failed stage reports no output
            reply = completion.content or ""
            run.note("adapter", reply)
            try:
                final = review(draft_text, reply)
            except EditError as exc:
                rejection = str(exc)
                logger.info("adapter reply %d rejected: %s", attempt + 1, rejection)
                messages = adapter_retry_messages(messages, reply, rejection)
                continue
            rejection = None
            if final != draft_text:  # edits touch the text only: the draft's tool calls and finish stay
                run.set_answer(run.answer.with_text(final))
            break
        if rejection is not None:
            run.note("adapter_rejection_reason", rejection)
        return None
