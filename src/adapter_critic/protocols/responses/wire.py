"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI Responses API on the wire, as msgspec Structs: the request fields read, the `response` object with
its output items and usage, and every stream event this server sends.

Request views hold only what the mapping reads (unknown fields are allowed: clients send back whole output items,
with ids and statuses, as input). Response Structs are encoded as they are: no field is left to a default a client
might miss (`error: null`, `incomplete_details: null` are sent, as OpenAI does).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ...events import Extension

# -- the request ----------------------------------------------------------------------------------------------


class Part(msgspec.Struct):
    """A content part of an input message: `input_text`, `output_text` (an earlier answer sent back), `refusal`,
    `input_image`, `input_file`."""

    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class Item(msgspec.Struct):
    """An input item: a message (`type` may be left out), a `function_call` the model made, a
    `function_call_output`, a `reasoning` item sent back (dropped), or an `item_reference` (refused)."""

    type: str = "message"
    role: str | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[Part] | None = None


class FunctionTool(msgspec.Struct):
    """A tool of the request; only `function` tools can be run by a chat-completions model."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: msgspec.Raw = msgspec.Raw()  # the JSON schema, passed on as it came (empty: none given)
    strict: bool | None = None


class NamedToolChoice(msgspec.Struct):
    """`tool_choice` as an object: `{"type": "function", "name": ...}` is the one kind a chat model has."""

    type: str
    name: str | None = None


class TextFormat(msgspec.Struct):
    """`text.format`: `text`, `json_object`, or `json_schema` with its `name`, `schema`, `strict`, `description`."""

    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class TextConfig(msgspec.Struct):
    format: TextFormat | None = None


class ReasoningConfig(msgspec.Struct):
    effort: str | None = None


# -- the response ---------------------------------------------------------------------------------------------

Status = Literal["completed", "incomplete", "in_progress", "failed"]


class OutputText(msgspec.Struct, tag="output_text", tag_field="type"):
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class MessageItem(msgspec.Struct, tag="message", tag_field="type"):
    id: str
    status: Status
    content: list[OutputText]
    role: str = "assistant"


class FunctionCallItem(msgspec.Struct, tag="function_call", tag_field="type"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Status = "completed"


class ReasoningText(msgspec.Struct, tag="reasoning_text", tag_field="type"):
    text: str


class ReasoningItem(msgspec.Struct, tag="reasoning", tag_field="type"):
    """What a reasoning model thought before it answered (`reasoning_content` / `reasoning` upstream)."""

    id: str
    content: list[ReasoningText]
    summary: list[Any] = []
    status: Status = "completed"


OutputItem = MessageItem | FunctionCallItem | ReasoningItem


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(msgspec.Struct):
    reason: str


class ResponseError(msgspec.Struct):
    """`response.error` of a failed response: `code` is one the API defines (`server_error`,
    `rate_limit_exceeded`); `type` is the error envelope's (`upstream_error`, …)."""

    code: str
    message: str
    type: str | None = None
    param: str | None = None


class Response(msgspec.Struct, kw_only=True):
    """The `response` object: the answer, what the request asked for (echoed), and the `adapter_critic` extension
    once the run is done."""

    id: str
    object: str = "response"
    created_at: int
    status: Status
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = []
    parallel_tool_calls: bool = True
    previous_response_id: None = None
    reasoning: dict[str, Any] = {}
    store: bool = False  # nothing is kept: a later `previous_response_id` cannot refer to this response
    temperature: float | None = None
    text: Any = {}
    tool_choice: Any = "auto"
    tools: Any = []  # the request's, as it sent them
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}
    adapter_critic: Extension | msgspec.UnsetType = msgspec.UNSET


# -- stream events (each carries `sequence_number`, counted from 0 per response) --------------------------------


class _Event(msgspec.Struct, tag_field="type", kw_only=True):
    sequence_number: int


class Created(_Event, tag="response.created"):
    response: Response


class InProgress(_Event, tag="response.in_progress"):
    response: Response


class Completed(_Event, tag="response.completed"):
    response: Response


class Incomplete(_Event, tag="response.incomplete"):
    response: Response


class Failed(_Event, tag="response.failed"):
    response: Response


class ItemAdded(_Event, tag="response.output_item.added"):
    output_index: int
    item: OutputItem


class ItemDone(_Event, tag="response.output_item.done"):
    output_index: int
    item: OutputItem


class PartAdded(_Event, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class PartDone(_Event, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class TextDelta(_Event, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = []


class TextDone(_Event, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = []


class ReasoningDelta(_Event, tag="response.reasoning_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningDone(_Event, tag="response.reasoning_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str


class ArgumentsDelta(_Event, tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(_Event, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    arguments: str


class Error(_Event, tag="error"):
    code: str | None
    message: str
    param: str | None


StreamEvent = (
    Created
    | InProgress
    | Completed
    | Incomplete
    | Failed
    | ItemAdded
    | ItemDone
    | PartAdded
    | PartDone
    | TextDelta
    | TextDone
    | ReasoningDelta
    | ReasoningDone
    | ArgumentsDelta
    | ArgumentsDone
    | Error
)
