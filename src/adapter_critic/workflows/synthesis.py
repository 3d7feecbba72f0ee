"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Mixture-of-agents' aggregate-and-synthesize prompt (Wang et al., 2024) and the messages a later layer's proposer or
the aggregator is sent: the conversation as the client sent it, with the instruction and the earlier layer's
responses added to its system prompt, as the paper does — appended to the conversation's leading `system` (or
`developer`) message, else in a new leading `system` message (never one after the conversation, which breaks the
chat templates of many local models)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..core import Message
from .prompts import tagged, with_text_added

DEFAULT_SYNTHESIS_PROMPT = """\
You have been given a set of responses, written by several different models, to the latest user query. Your task \
is to synthesize them into one response of high quality. Weigh what they say critically: some of it may be biased \
or wrong. Do not simply copy any one of them; write a refined, accurate and complete answer to the query, well \
structured and coherent, held to the highest standard of accuracy and reliability. Do not mention these responses \
or that there were several.\
"""

RESPONSES_OPEN = "<responses_from_models>"
RESPONSES_CLOSE = "</responses_from_models>"


def responses_block(instruction: str, responses: list[str]) -> str:
    """The instruction, then the responses numbered in order, each between its own tags."""
    numbered = "\n\n".join(tagged(f"response_{i}", text) for i, text in enumerate(responses, 1))
    return f"{instruction}\n\n{RESPONSES_OPEN}\n{numbered}\n{RESPONSES_CLOSE}"


def synthesis_messages(
    raw_messages: list[msgspec.Raw], messages: list[Message], instruction: str, responses: list[str]
) -> list[Any]:
    """The conversation with the instruction and `responses` added to its system prompt; every message otherwise
    forwarded exactly as sent."""
    block = responses_block(instruction, responses)
    if messages and messages[0].role in ("system", "developer"):
        return [with_text_added(raw_messages[0], block), *raw_messages[1:]]
    return [{"role": "system", "content": block}, *raw_messages]
