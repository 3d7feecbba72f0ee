"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `POST /messages/count_tokens` counts: a Messages request without `max_tokens` (Anthropic's count request),
seen the three ways an upstream can be asked about it, and this server's own estimate when none can be.

- `Counted.for_anthropic`: the request as the client sent it, for an Anthropic-protocol target's own
  `/messages/count_tokens` (the model swapped for the target's, `x_adapter_critic` left out);
- `Counted.chat`: the chat-completions `messages` and `tools` it means (`inbound.chat_body`, as a run would send
  them), for a vLLM server's `/tokenize`;
- `Counted.text`: the conversation as plain text, one `role: text` line per message (a tool call as
  `name(arguments)`), then the tools as JSON — for a llama.cpp server's `/tokenize`, and for the estimate.

The estimate (`estimate`): the characters of `text` divided by 4, rounded up, plus `IMAGE_TOKENS` per image — the
usual rule of thumb for English text and code under current tokenizers; other languages count more tokens per
character, so it is a rough guide, never a limit to rely on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from . import wire
from .inbound import chat_body, decoded

# What one image is estimated at: about what a large image costs Claude (width x height / 750, scaled to fit).
IMAGE_TOKENS = 1600

_encoder = msgspec.json.Encoder()


class CountRequest(msgspec.Struct, kw_only=True):
    """`POST /messages/count_tokens`: the fields of a Messages request that make its input (no `max_tokens`)."""

    model: Annotated[str, msgspec.Meta(min_length=1)]
    messages: Annotated[list[wire.MessageParam], msgspec.Meta(min_length=1)]
    system: str | list[wire.TextBlock] | None = None
    tools: list[wire.Tool] | None = None
    tool_choice: wire.ToolChoice | None = None


_decoder = msgspec.json.Decoder(CountRequest)
_body_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass(frozen=True, slots=True)
class Counted:
    """A count request, decoded and checked, in each form an upstream (or the estimate) takes it."""

    model: str
    body: bytes  # as the client sent it
    chat: dict[str, Any]
    text: str
    images: int

    def for_anthropic(self, model: str) -> bytes:
        """The body of an Anthropic target's `/messages/count_tokens` call (the client's body is read field by field
        only here: no other target needs it)."""
        fields = _body_decoder.decode(self.body)
        body = {key: value for key, value in fields.items() if key != "x_adapter_critic"}
        body["model"] = msgspec.Raw(_encoder.encode(model))
        return _encoder.encode(body)

    def estimate(self) -> int:
        return math.ceil(len(self.text) / 4) + IMAGE_TOKENS * self.images


def decode_count(body: bytes) -> Counted:
    """A count request body; raises `RequestError` (400) naming the field, as `POST /messages` does."""
    request = decoded(_decoder, body)
    as_messages = wire.MessagesRequest(
        model=request.model,
        messages=request.messages,
        max_tokens=1,  # not part of the input; `chat_body` reads it
        system=request.system,
        tools=request.tools,
        tool_choice=request.tool_choice,
    )
    chat = chat_body(as_messages)
    chat = {key: chat[key] for key in ("messages", "tools") if key in chat}
    text, images = rendered(chat)
    return Counted(request.model, body, chat, text, images)


def rendered(chat: dict[str, Any]) -> tuple[str, int]:
    """Chat `messages` and `tools` as plain text (see the module), and how many images they hold."""
    lines: list[str] = []
    images = 0
    for message in chat["messages"]:
        content = message.get("content")
        pieces: list[str] = []
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    pieces.append(part["text"])
                else:
                    images += 1
        for call in message.get("tool_calls") or ():
            function = call["function"]
            pieces.append(f"{function['name']}({function['arguments']})")
        lines.append(f"{message['role']}: {' '.join(pieces)}")
    if chat.get("tools"):
        lines.append(f"tools: {_encoder.encode(chat['tools']).decode()}")
    return "\n".join(lines), images
