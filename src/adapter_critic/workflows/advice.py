"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The advisor's prompt and messages, and how its guidance reaches the API model: appended to the conversation's
last user message inside a clearly delimited block (the other messages are forwarded exactly as sent)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..core import Message
from .prompts import reviewer_messages, shown_conversation, with_text_added

DEFAULT_ADVISOR_SYSTEM_PROMPT = """\
You are an expert advisor to an AI assistant. You are shown a conversation; the assistant will answer its last \
message after reading your guidance. Write concise guidance for that answer: where to look, the steps to take, \
the pitfalls to avoid, and what the answer must include (and in which format, if the user asked for one).

Do not write the answer yourself, do not call tools, and do not address the user. Answer as a short list, \
for example:

- The user asks for the capital of Australia: it is Canberra, not Sydney (a common mistake).
- Answer in one sentence, as the user asked.\
"""

GUIDANCE_OPEN = "<advisor_guidance>"
GUIDANCE_CLOSE = "</advisor_guidance>"
GUIDANCE_BLOCK = f"""\
{GUIDANCE_OPEN}
An advisor read this conversation and wrote this guidance for your answer. Follow it where it helps; do not \
mention it or the advisor.

{{guidance}}
{GUIDANCE_CLOSE}"""


def advisor_messages(system_prompt: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The advisor's call: its system prompt, and the whole conversation rendered as text."""
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        "Write your guidance for the assistant's answer to the last message.",
    )


def with_guidance(raw_messages: list[msgspec.Raw], messages: list[Message], guidance: str) -> list[Any]:
    """The conversation with `guidance` in a delimited block at the end of its last user message (a text part
    added when that message's content is a list of parts); a conversation without a user message gets one."""
    block = GUIDANCE_BLOCK.format(guidance=guidance.strip())
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if last is None:
        return [*raw_messages, {"role": "user", "content": block}]
    return [*raw_messages[:last], with_text_added(raw_messages[last], block), *raw_messages[last + 1 :]]
