"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A Responses request mapped onto the run's request: the chat-completions body the workflows run on (`messages`
and options), and what the response echoes back (`Echo`).

- `input` (a string, or items: messages with `input_text` / `input_image` parts, the `function_call`s an earlier
  answer made and their `function_call_output`s) becomes `messages`; `instructions` a leading system message.
- `tools` (function tools), `tool_choice`, `temperature`, `top_p`, `parallel_tool_calls`, `max_output_tokens`
  (as `max_tokens`), `text.format` (as `response_format`), `reasoning.effort` (as `reasoning_effort`) and `user`
  become the options every API-stage call gets (`tool_choice` and `parallel_tool_calls` only with tools: chat
  APIs refuse them without); `metadata` is only echoed.
- Nothing is stored: `store` is answered `false`, and `previous_response_id`, `conversation`, `background` and
  stored `prompt`s are refused (400) — the client sends the whole conversation as `input`.
- `x_adapter_critic` / `extra_body` go on as they came (the chat decoder reads them), and so does any field
  the Responses API does not define (vendor fields such as `top_k`); the Responses fields a chat model has no
  use for (`include`, `truncation`, …) are dropped.

Every refusal is a `RequestError` naming the Responses parameter (`input[2].content[0].file_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...errors import RequestError
from ...request.decode import decode_fields
from .items import messages_of, missing, required
from .wire import FunctionTool, Item, NamedToolChoice, ReasoningConfig, TextConfig

# Responses fields a chat-completions model has no use for: accepted and dropped.
_DROPPED = frozenset(
    {
        "include",
        "truncation",
        "stream_options",
        "top_logprobs",
        "max_tool_calls",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "store",
    }
)
_STATEFUL = {
    "previous_response_id": "this server keeps no responses",
    "conversation": "this server keeps no conversations",
    "prompt": "this server keeps no stored prompts",
}
_MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "max_output_tokens",
        "text",
        "reasoning",
        "metadata",
        "user",
        "stream",
        "background",
    }
)
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


@dataclass(slots=True)
class Echo:
    """What the `response` object repeats of the request (the Responses API echoes its settings); `text`,
    `tool_choice` and `tools` as the request sent them (raw JSON)."""

    instructions: str | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    text: Any = field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Any = "auto"
    tools: Any = field(default_factory=list)
    user: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    reasoning: dict[str, Any] = field(default_factory=lambda: {"effort": None, "summary": None})


@dataclass(slots=True)
class Mapped:
    """A Responses request as the run takes it: a chat-completions body, whether to stream, and the echo."""

    model: str
    chat_body: bytes
    stream: bool
    echo: Echo


_encoder = msgspec.json.Encoder()
_items_decoder = msgspec.json.Decoder(str | list[Item])
_tools_decoder = msgspec.json.Decoder(list[FunctionTool])
_tool_choice_decoder = msgspec.json.Decoder(str | NamedToolChoice)
_text_decoder = msgspec.json.Decoder(TextConfig)
_reasoning_decoder = msgspec.json.Decoder(ReasoningConfig | None)
_metadata_decoder = msgspec.json.Decoder(dict[str, str] | None)
_number_decoder = msgspec.json.Decoder(float | None)
_tokens_decoder = msgspec.json.Decoder(int | None)
_bool_decoder = msgspec.json.Decoder(bool | None)
_str_decoder = msgspec.json.Decoder(str | None)


def map_request(body: bytes, *, max_items: int | None = None) -> Mapped:
    """Map a Responses request body; raises `RequestError` (400) naming the field that is wrong.

    `max_items` bounds the length of `input` (the server's `max_messages`)."""
    try:
        return _map(decode_fields(body), max_items)
    except RecursionError:
        raise RequestError("The request body is nested too deeply.") from None


def _map(fields: dict[str, msgspec.Raw], max_items: int | None) -> Mapped:
    model = _decode(fields, "model", _str_decoder)
    if not model:
        raise RequestError("`model` must be a non-empty string.", param="model")
    for name, why in _STATEFUL.items():
        if _decode(fields, name, _any_decoder) is not None:
            raise RequestError(
                f"`{name}` is not supported: {why} (store is always false). Send the whole conversation as "
                "`input` — earlier turns as input items, with the output items of earlier responses as they came.",
                param=name,
            )
    if _decode(fields, "background", _bool_decoder):
        raise RequestError("`background` is not supported: responses are answered while you wait.", param="background")
    if "input" not in fields:
        raise RequestError("`input` is required: a string, or a non-empty array of input items.", param="input")
    items = _decode(fields, "input", _items_decoder)
    if isinstance(items, list) and max_items is not None and len(items) > max_items:
        raise RequestError(
            f"`input` has {len(items)} items; this server accepts at most {max_items} (max_messages).", param="input"
        )

    echo = Echo()
    echo.instructions = _decode(fields, "instructions", _str_decoder)
    messages = messages_of(items, echo.instructions)
    chat: dict[str, Any] = {"model": model, "messages": messages}
    for name, value in fields.items():  # vendor fields go on, like a chat request's
        if name not in _MAPPED and name not in _DROPPED and name not in _STATEFUL:
            chat[name] = value
    _options(fields, chat, echo)
    stream = bool(_decode(fields, "stream", _bool_decoder))
    if stream:
        chat["stream"] = True
    return Mapped(model=model, chat_body=_encoder.encode(chat), stream=stream, echo=echo)


def _options(fields: dict[str, msgspec.Raw], chat: dict[str, Any], echo: Echo) -> None:
    """The sampling, tool and format settings as chat-completions options, and what the response echoes of them."""
    for name in ("temperature", "top_p"):
        value = _decode(fields, name, _number_decoder)
        if value is not None:
            chat[name] = value
            setattr(echo, name, value)
    max_tokens = _decode(fields, "max_output_tokens", _tokens_decoder)
    if max_tokens is not None:
        if max_tokens < 1:
            raise RequestError("`max_output_tokens` must be at least 1.", param="max_output_tokens")
        chat["max_tokens"] = echo.max_output_tokens = max_tokens
    user = _decode(fields, "user", _str_decoder)
    if user is not None:
        chat["user"] = echo.user = user
    echo.metadata = _decode(fields, "metadata", _metadata_decoder) or {}
    if "tools" in fields and bytes(fields["tools"]).strip() != b"null":
        tools = _decode(fields, "tools", _tools_decoder)
        chat["tools"] = [_tool(tool, index) for index, tool in enumerate(tools)]
        if not chat["tools"]:
            del chat["tools"]
        echo.tools = fields["tools"]
    # Chat APIs refuse tool settings without tools (agents send `parallel_tool_calls: false` either way).
    choice = _decode(fields, "tool_choice", _tool_choice_decoder, nullable=True)
    if choice is not None:
        mapped = _tool_choice(choice)
        echo.tool_choice = fields["tool_choice"]
        if "tools" in chat:
            chat["tool_choice"] = mapped
    parallel = _decode(fields, "parallel_tool_calls", _bool_decoder)
    if parallel is not None:
        echo.parallel_tool_calls = parallel
        if "tools" in chat:
            chat["parallel_tool_calls"] = parallel
    text = _decode(fields, "text", _text_decoder, nullable=True)
    if text is not None and text.format is not None:
        response_format = _response_format(text)
        if response_format is not None:
            chat["response_format"] = response_format
        echo.text = fields["text"]
    reasoning = _decode(fields, "reasoning", _reasoning_decoder)
    if reasoning is not None and reasoning.effort is not None:
        chat["reasoning_effort"] = reasoning.effort
        echo.reasoning = {"effort": reasoning.effort, "summary": None}


def _tool(tool: FunctionTool, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    if tool.type != "function":
        raise RequestError(
            f"`{where}.type` {tool.type!r} is not supported: the served models run function tools only "
            "(hosted tools such as web or file search are not available here).",
            param=f"{where}.type",
        )
    function: dict[str, Any] = {"name": required(tool.name, f"{where}.name")}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters and bytes(tool.parameters).strip() != b"null":
        function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: str | NamedToolChoice) -> Any:
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise RequestError(
                f"`tool_choice` {choice!r} is not supported; use auto, none, required or a function.",
                param="tool_choice",
            )
        return choice
    if choice.type != "function":
        raise RequestError(
            f"`tool_choice.type` {choice.type!r} is not supported; name a function: "
            '{"type": "function", "name": ...}.',
            param="tool_choice.type",
        )
    return {"type": "function", "function": {"name": required(choice.name, "tool_choice.name")}}


def _response_format(text: TextConfig) -> dict[str, Any] | None:
    fmt = text.format
    assert fmt is not None
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.type == "json_schema":
        schema: dict[str, Any] = {
            "name": required(fmt.name, "text.format.name"),
            "schema": fmt.schema if fmt.schema is not None else missing("text.format.schema"),
        }
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        if fmt.description is not None:
            schema["description"] = fmt.description
        return {"type": "json_schema", "json_schema": schema}
    raise RequestError(
        f"`text.format.type` {fmt.type!r} is not supported; use text, json_object or json_schema.",
        param="text.format.type",
    )


_any_decoder = msgspec.json.Decoder()


def _decode(fields: dict[str, msgspec.Raw], name: str, decoder: Any, *, nullable: bool = False) -> Any:
    """Field `name` decoded (None when absent, or null with `nullable`); a wrong value is a 400 naming its path."""
    raw = fields.get(name)
    if raw is None or (nullable and bytes(raw).strip() == b"null"):
        return None
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `$")
        if not message:
            message, at = str(exc), ""
        param = f"{name}{at.rstrip('`')}"
        missing = _MISSING_FIELD.fullmatch(message)
        if missing is not None:
            param = f"{param}.{missing.group(1)}"
        raise RequestError(f"`{param}`: {message}.", param=param) from None


_MISSING_FIELD = re.compile(r"Object missing required field `([^`]*)`")
