"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

An Anthropic Messages request as the run's chat request (the inbound side's decoding).

The request is validated as Messages (`wire.MessagesRequest`: a 400 names the field as the client sent it), then
written as the chat-completions body it means and decoded like any other (`request.decode`), so the same checks,
overrides (`x_adapter_critic`) and workflows apply:

- `system` → a first `system` message; `text` and `image` blocks → content parts; `tool_result` blocks → `tool`
  messages (before the rest of their turn); an assistant's `tool_use` blocks → `tool_calls` with JSON-string
  arguments; `thinking` blocks are dropped (they are the model's, not the conversation's);
- `max_tokens`, `stop_sequences` → `stop`, `temperature`, `top_p`, `tools`, `tool_choice` (`any` → `required`,
  `disable_parallel_tool_use` → `parallel_tool_calls = false`), `metadata.user_id` → `user`; `top_k` has no
  chat-completions counterpart and is left out;
- `stream` streams, with usage (the Messages stream reports it at its end).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from ...core import ChatRequest
from ...errors import RequestError
from ...request.decode import decode_request
from . import wire

_T = TypeVar("_T")
_decoder = msgspec.json.Decoder(wire.MessagesRequest)
_encoder = msgspec.json.Encoder()


def decode_messages(body: bytes, *, max_messages: int | None) -> ChatRequest:
    """The run's `ChatRequest` for a Messages request body; raises `RequestError` (400) naming the field."""
    request = decoded(_decoder, body)
    return decode_request(_encoder.encode(chat_body(request)), max_messages=max_messages)


def decoded(decoder: msgspec.json.Decoder[_T], body: bytes) -> _T:
    """`body` decoded as a Messages-shaped request; a `RequestError` (400) naming the field as the client sent it."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, _, where = str(exc).rpartition(" - at `$")
        param = where.rstrip("`").lstrip(".") if message else None
        missing = re.fullmatch(r"Object missing required field `(\w+)`", message or str(exc))
        if missing is not None:
            param = f"{param}.{missing.group(1)}" if param else missing.group(1)
        said = f"`{param}`: {message}" if param and message else str(exc)
        raise RequestError(f"{said}.", param=param) from None
    except msgspec.DecodeError:
        raise RequestError("The request body is not a valid JSON object.") from None
    except RecursionError:
        raise RequestError("The request body is nested too deeply.") from None


def chat_body(request: wire.MessagesRequest) -> dict[str, Any]:
    """The chat-completions body a Messages request means."""
    messages: list[dict[str, Any]] = []
    system = _system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages += _messages(message)
    body: dict[str, Any] = {"model": request.model, "messages": messages, "max_tokens": request.max_tokens}
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
    if request.tool_choice is not None and request.tools:
        _tool_choice(request.tool_choice, body)
    if request.metadata is not None and request.metadata.user_id:
        body["user"] = request.metadata.user_id
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.x_adapter_critic is not None:
        body["x_adapter_critic"] = request.x_adapter_critic
    return body


def _system_text(system: str | list[wire.TextBlock] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    return "\n\n".join(block.text for block in system)


def _messages(message: wire.MessageParam) -> list[dict[str, Any]]:
    """One Messages turn as chat messages: a user turn's tool results first, as `tool` messages."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        return [_assistant(message.content)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, wire.ToolResultBlock):
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_text(block)})
        elif isinstance(block, wire.TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, wire.ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.source)}})
        elif isinstance(block, wire.ToolUseBlock):
            raise RequestError("A user turn cannot hold a `tool_use` block; only the assistant calls tools.")
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        text = "\n\n".join(part["text"] for part in parts) if only_text and len(parts) == 1 else None
        out.append({"role": "user", "content": text if text is not None else parts})
    return out


def _assistant(blocks: list[wire.Block]) -> dict[str, Any]:
    texts = [block.text for block in blocks if isinstance(block, wire.TextBlock)]
    calls = [
        {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": _json(block.input)}}
        for block in blocks
        if isinstance(block, wire.ToolUseBlock)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _result_text(block: wire.ToolResultBlock) -> str:
    text = block.content if isinstance(block.content, str) or block.content is None else _blocks_text(block.content)
    text = text or ""
    return f"Error: {text}" if block.is_error else text


def _blocks_text(blocks: list[wire.TextBlock | wire.ImageBlock]) -> str:
    return "\n\n".join(block.text if isinstance(block, wire.TextBlock) else "[image]" for block in blocks)


def _image_url(source: wire.ImageSource) -> str:
    if source.type == "base64":
        return f"data:{source.media_type or 'image/png'};base64,{source.data or ''}"
    return source.url or ""


def _json(value: Any) -> str:
    return _encoder.encode(value if value is not None else {}).decode()


def _tool(tool: wire.Tool) -> dict[str, Any]:
    if tool.type not in (None, "custom"):
        raise RequestError(
            f"Tool {tool.name!r} is an Anthropic server tool ({tool.type}); this server runs the conversation "
            "through other models and can only offer client tools (a `name`, `description` and `input_schema`).",
            param="tools",
        )
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _tool_choice(choice: wire.ToolChoice, body: dict[str, Any]) -> None:
    if choice.type == "tool":
        if not choice.name:
            raise RequestError("`tool_choice` of type `tool` needs the `name` of the tool.", param="tool_choice.name")
        body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    if choice.disable_parallel_tool_use:
        body["parallel_tool_calls"] = False
