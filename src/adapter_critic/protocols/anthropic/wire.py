"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The Anthropic Messages API's wire shapes, as msgspec Structs: the request (what clients send and what a stage
call to an Anthropic target sends), the answer and the stream events (what an Anthropic target answers), and the
error envelope.

Request Structs are strict about the blocks they translate (an unknown block type is a 400 naming it); answer
Structs are views that read only what the mapping needs, so a newer API's extra fields never break a call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

# -- request ---------------------------------------------------------------------------------------


class ImageSource(msgspec.Struct, omit_defaults=True):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class TextBlock(msgspec.Struct, tag="text", tag_field="type", omit_defaults=True):
    text: str
    cache_control: Any = None


class ImageBlock(msgspec.Struct, tag="image", tag_field="type", omit_defaults=True):
    source: ImageSource
    cache_control: Any = None


class ToolUseBlock(msgspec.Struct, tag="tool_use", tag_field="type", omit_defaults=True):
    id: str
    name: str
    input: Any = msgspec.field(default_factory=dict)
    cache_control: Any = None


class ToolResultBlock(msgspec.Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | None = None
    is_error: bool | None = None
    cache_control: Any = None


class ThinkingBlock(msgspec.Struct, tag="thinking", tag_field="type", omit_defaults=True):
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(msgspec.Struct, tag="redacted_thinking", tag_field="type", omit_defaults=True):
    data: str


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock


class MessageParam(msgspec.Struct, omit_defaults=True):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(msgspec.Struct, omit_defaults=True):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    description: str | None = None
    input_schema: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    type: str | None = None  # `custom` (or absent); server tools (`web_search_…`) cannot be translated
    cache_control: Any = None


class ToolChoice(msgspec.Struct, omit_defaults=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(msgspec.Struct, omit_defaults=True):
    user_id: str | None = None


class MessagesRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`POST /v1/messages`; `x_adapter_critic` is this server's per-request overrides, as on chat completions."""

    model: Annotated[str, msgspec.Meta(min_length=1)]
    messages: Annotated[list[MessageParam], msgspec.Meta(min_length=1)]
    max_tokens: Annotated[int, msgspec.Meta(ge=1)]
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    metadata: Metadata | None = None
    x_adapter_critic: Any = None


# -- answer and stream events (views) ----------------------------------------------------------------


class Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class ContentBlock(msgspec.Struct):
    """Any content block of an answer: `text`, `tool_use`, `thinking`; other types are skipped."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    thinking: str | None = None


class Message(msgspec.Struct):
    """An answer (`"type": "message"`)."""

    type: str
    content: list[ContentBlock]
    id: str = ""
    model: str = ""
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: Usage | None = None


class Delta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class ErrorDetail(msgspec.Struct):
    type: str | None = None
    message: str | None = None


class StreamEvent(msgspec.Struct):
    """One event of a streamed answer (`message_start`, `content_block_*`, `message_delta`, `message_stop`,
    `ping`, `error`), whatever its type: the fields a type does not have stay None."""

    type: str
    message: Message | None = None
    index: int | None = None
    content_block: ContentBlock | None = None
    delta: Delta | None = None
    usage: Usage | None = None
    error: ErrorDetail | None = None


class ErrorEnvelope(msgspec.Struct):
    """`{"type": "error", "error": {"type", "message"}}`."""

    error: ErrorDetail
    type: str = "error"


# Error types by HTTP status, as the API (and so its SDKs) use them.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """The Anthropic error type of an HTTP status."""
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
