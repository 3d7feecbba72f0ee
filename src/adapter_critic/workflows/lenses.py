"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The panel's lenses and its coordinator: the default lenses for general chat, the coordinator's prompt, and the
messages each is sent. Every lens reviews the draft as the critic does, through its own system prompt."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ..core import Message
from .prompts import critic_messages, reviewer_messages, shown_conversation, tagged

LensName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Lens(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One reviewer of the panel: its name (the stage is `lens:<name>`), its system prompt and, optionally, a target
    of its own (a target table, as `api`; default: the served model's `critic` target)."""

    name: LensName
    """The lens's name (letters, digits, `_`, `.`, `-`); its stage is `lens:<name>`."""
    system_prompt: Annotated[str, msgspec.Meta(min_length=1)]
    """What this reviewer looks for."""
    target: dict[str, Any] | None = None
    """A target of its own (a target table, as `api`, or another served model: `{ served = "<id>" }`); not set: the
    `critic` target, else `api`."""


class RequestLens(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A lens as a request may give it (`x_adapter_critic.lenses`): a name and a system prompt, never a `target` —
    where a stage's call goes is the operator's, within the override URL checks (docs/guides/overrides.md)."""

    name: LensName
    system_prompt: Annotated[str, msgspec.Meta(min_length=1)]


_FORMAT = """

Write a short critique the assistant will use to revise its draft: a list of concrete problems, each with how to \
fix it, for example:

- The draft says the capital of Australia is Sydney; it is Canberra.

If you find no problem of this kind, say so in one sentence. Do not write the revised reply yourself."""


def _lens(name: str, focus: str) -> Lens:
    return Lens(
        name=name,
        system_prompt=f"You are one reviewer on a panel reviewing an AI assistant's draft reply. You are shown the "
        f"assistant's system prompt, the conversation and the draft reply to its last message. Your only concern "
        f"is {focus}; other reviewers look at everything else.{_FORMAT}",
    )


DEFAULT_LENSES = (
    _lens("correctness", "correctness: factual errors, wrong reasoning or calculations, code that would not work"),
    _lens("completeness", "completeness: parts of the request the draft leaves out or answers only in part"),
    _lens(
        "instructions",
        "whether the draft follows every instruction of the user and the system prompt: format, length, language, "
        "style and constraints",
    ),
    _lens("clarity", "clarity: structure, wording, needless length, and anything a reader could misunderstand"),
)

DEFAULT_COORDINATOR_SYSTEM_PROMPT = """\
You coordinate a panel of reviewers of an AI assistant's draft reply. You are shown the conversation, the draft \
and each reviewer's critique, headed by the reviewer's name. Merge them into one prioritised list of changes for \
the assistant, most important first:

- merge duplicates into one item and credit every reviewer who raised it, e.g. [correctness, clarity];
- when reviewers disagree, say so in the item and say which advice to follow and why;
- leave out points that are wrong or do not apply.

Answer with the list only, for example:

1. [correctness, completeness] The draft says the capital of Australia is Sydney; it is Canberra.
2. [clarity] Conflict: clarity asks for a shorter answer, completeness for an example; add the example in one \
sentence.\
"""


def lens_messages(lens: Lens, messages: list[Message], draft: str) -> list[dict[str, Any]]:
    return critic_messages(lens.system_prompt, messages, draft)


def coordinator_messages(
    system_prompt: str, messages: list[Message], draft: str, critiques: dict[str, str]
) -> list[dict[str, Any]]:
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        tagged("draft_reply", draft),
        tagged("critiques", concatenated(critiques)),
        "Merge the critiques into one prioritised list.",
    )


def concatenated(critiques: dict[str, str]) -> str:
    """The critiques one after another, each headed by its lens (`coordinator = false`, or a failed coordinator)."""
    return "\n\n".join(f"[{name}]\n{critique.strip()}" for name, critique in critiques.items())
