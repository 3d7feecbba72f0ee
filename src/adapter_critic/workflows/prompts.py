"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The reviewer prompts: the package's default system prompts and the messages each stage is sent
(docs/guides/workflows.md).

The critic's second pass never appends a `system` message after the conversation (that breaks the
chat templates of many local models): the critique goes in a final `user` message instead.
"""

from __future__ import annotations

import contextvars
from typing import Any

import msgspec

from ..core import Message

DEFAULT_ADAPTER_SYSTEM_PROMPT = """\
You are a careful reviewer of an AI assistant's draft reply. You are shown the conversation and the \
assistant's draft reply to its last message. Decide whether the draft is correct, complete and follows \
every instruction in the conversation.

Reply in exactly one of two forms, and nothing else:

1. If the draft needs no change, reply with the single word:
lgtm

2. Otherwise, reply with one or more edit blocks. Each block names text copied EXACTLY from the draft \
(SEARCH) and the text to put in its place (REPLACE). An empty REPLACE deletes the text. Blocks are \
applied in order. Keep each SEARCH short but unique. Example:

<<<<<<< SEARCH
The capital of Australia is Sydney.
=======
The capital of Australia is Canberra.
>>>>>>> REPLACE

Do not rewrite the whole reply, do not explain your edits, and do not add anything outside the blocks.\
"""

DEFAULT_CRITIC_SYSTEM_PROMPT = """\
You are a meticulous reviewer of an AI assistant's draft reply. You are shown the assistant's system \
prompt, the conversation and the draft reply to its last message. Write a short critique that the \
assistant will use to revise its draft: list concrete problems (factual errors, missed instructions, \
missing parts, unclear wording, wrong format) and say how to fix each. If the draft is already good, \
say so in one sentence. Do not write the revised reply yourself.

Answer as a short list, for example:

- The draft says the capital of Australia is Sydney; it is Canberra.
- The user asked for three examples; the draft gives two. Add one more.\
"""

SECOND_PASS_INSTRUCTION = """\
A reviewer read your previous reply and wrote this critique:

{critique}

Write an improved reply to my previous message that takes the critique into account. Reply with the \
revised answer only: no preamble, and no mention of the critique or the reviewer.\
"""

ADAPTER_RETRY_INSTRUCTION = """\
Your review could not be used: {reason}

Reply again with either the single word lgtm, or edit blocks whose SEARCH text is copied exactly from \
the draft, in the format described in the instructions.\
"""


_TOO_DEEP = "[nested too deeply to show]"


def render_tool_calls(tool_calls: list[Any] | None) -> str | None:
    """A draft's tool calls as JSON text (reviewers answer in text; they never see structured calls)."""
    if not tool_calls:
        return None
    try:
        return msgspec.json.encode(tool_calls).decode()
    except RecursionError:  # decoded higher up the stack than it is rendered; never fail a request for it
        return _TOO_DEEP


def draft_as_text(content: str | None, tool_calls: list[Any] | None) -> str:
    """The draft as reviewers and the second pass see it: its text, then its tool calls as JSON."""
    parts = [content] if content else []
    rendered = render_tool_calls(tool_calls)
    if rendered:
        parts.append(f"Tool calls: {rendered}")
    return "\n\n".join(parts)


def render_conversation(messages: list[Message]) -> str:
    blocks = []
    for message in messages:
        text = content_text(message.content)
        rendered = render_tool_calls(message.tool_calls)
        if rendered:
            text = f"{text}\n[tool calls] {rendered}" if text else f"[tool calls] {rendered}"
        blocks.append(f"[{message.role}]\n{text}")
    return "\n\n".join(blocks)


def tagged(tag: str, text: str) -> str:
    """`text` between `<tag>` and `</tag>` lines: how a reviewer is shown each part of what it reviews."""
    return f"<{tag}>\n{text}\n</{tag}>"


def shown_conversation(messages: list[Message]) -> str:
    """The conversation rendered as text between `<conversation>` tags."""
    return tagged("conversation", render_conversation(messages))


# The lessons the reviewers of the run under way have learnt (docs/guides/learning.md): set by the pipeline around a
# workflow's run (`pipeline.run.Run.execute`, from its plan), read here, so every reviewer's call carries them
# whichever workflow builds it. A task started within the run (parallel stages) sees the same.
LESSONS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("adapter_critic_lessons", default=())
LESSONS_LEAD = "Lessons from feedback on earlier reviews (follow them):"


def reviewer_messages(system_prompt: str, *parts: str) -> list[dict[str, Any]]:
    """A reviewer's call (adapter, critic, judge, lens, …): its system prompt (with the run's lessons, if it has
    any), then one user message of `parts` with a blank line between each (the tagged conversation and reply first,
    the question last)."""
    lessons = LESSONS.get()
    if lessons:
        system_prompt += "\n\n" + LESSONS_LEAD + "".join(f"\n- {lesson}" for lesson in lessons)
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": "\n\n".join(parts)}]


def adapter_messages(system_prompt: str, messages: list[Message], draft: str) -> list[dict[str, Any]]:
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        tagged("draft_reply", draft),
        "Review the draft reply. Answer lgtm or with SEARCH/REPLACE edit blocks.",
    )


def adapter_retry_messages(previous: list[dict[str, Any]], reply: str, reason: str) -> list[dict[str, Any]]:
    return [
        *previous,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": ADAPTER_RETRY_INSTRUCTION.format(reason=reason)},
    ]


def critic_messages(system_prompt: str, messages: list[Message], draft: str) -> list[dict[str, Any]]:
    first_system = next((m for m in messages if m.role in ("system", "developer")), None)
    assistant_prompt = content_text(first_system.content) if first_system is not None else "(none)"
    conversation = [m for m in messages if m is not first_system]
    return reviewer_messages(
        system_prompt,
        tagged("assistant_system_prompt", assistant_prompt),
        shown_conversation(conversation),
        tagged("draft_reply", draft),
        "Write your critique of the draft reply.",
    )


def second_pass_messages(raw_messages: list[msgspec.Raw], draft: str, critique: str) -> list[Any]:
    """The original messages untouched, the draft as an assistant turn, the critique as a final user turn."""
    return revision_messages(raw_messages, draft, SECOND_PASS_INSTRUCTION.format(critique=critique))


def revision_messages(raw_messages: list[msgspec.Raw], draft: str, instruction: str) -> list[Any]:
    """The original messages untouched, the draft as an assistant turn, then `instruction` (what to revise it with)
    as a final user turn: never a trailing `system` message."""
    return [*raw_messages, {"role": "assistant", "content": draft}, {"role": "user", "content": instruction}]


def with_text_added(raw_message: msgspec.Raw, text: str) -> dict[str, Any]:
    """A message as sent with `text` after its content (a text part added when the content is a list of parts);
    every other field kept."""
    message = _message_decoder.decode(raw_message)
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [*content, {"type": "text", "text": text}]
    elif isinstance(content, str) and content:
        message["content"] = f"{content}\n\n{text}"
    else:
        message["content"] = text
    return message


_message_decoder = msgspec.json.Decoder(dict[str, Any])


def content_text(content: str | list[Any] | None) -> str:
    """A message's content as text: its text parts, other parts as `[type]` placeholders."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            parts.append(f"[{part.get('type', 'content')}]")
        else:
            try:
                parts.append(str(part))
            except RecursionError:
                parts.append(_TOO_DEEP)
    return "\n".join(parts)
