"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`re2` (Xu et al., 2023, "Re-Reading Improves Reasoning in Large Language Models"): the last user message is
sent with its question repeated after it ("Read the question again: …"), in the one API call, whose answer is the
client's as in `direct` (streamed live, every choice relayed).

A string content is repeated whole; of a content-part list, the text parts are repeated in one text part appended
to it (images and other parts are not sent twice). A message without text, and every other message, is sent
exactly as it came.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ..core import FinalCall
from .base import PerRequest, RunContext, Workflow

DEFAULT_LEAD = "Read the question again: "


class Re2Settings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    reread_lead: Annotated[str, msgspec.Meta(min_length=1, max_length=500), PerRequest()] = DEFAULT_LEAD
    """What comes before the repeated question."""


class Re2(Workflow):
    name = "re2"
    stages = ("api",)
    final_key = "api"
    many_choices = True  # one API call, as in `direct`: every choice the upstream gives is relayed
    Settings = Re2Settings

    async def run(self, run: RunContext) -> FinalCall:
        settings: Re2Settings = run.plan.settings
        messages = run.request.messages
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        if last is None:
            return run.final("api", run.request.messages_json, first=True)
        raw = run.request.raw_messages
        message = msgspec.json.decode(raw[last])
        content, repeated = reread(message.get("content"), settings.reread_lead)
        if repeated is None:
            return run.final("api", run.request.messages_json, first=True)  # no text to read again
        run.note("reread", repeated)
        return run.final("api", [*raw[:last], {**message, "content": content}, *raw[last + 1 :]], first=True)


def reread(content: Any, lead: str) -> tuple[Any, str | None]:
    """A user message's content with its question repeated after it, and the text added (None: no text to
    repeat, the content unchanged)."""
    if isinstance(content, str):
        if not content.strip():
            return content, None
        added = f"{lead}{content}"
        return f"{content}\n{added}", added
    if not isinstance(content, list):
        return content, None
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    ]
    question = "\n".join(text for text in texts if text.strip())
    if not question:
        return content, None
    added = f"{lead}{question}"
    return [*content, {"type": "text", "text": f"\n{added}"}], added
