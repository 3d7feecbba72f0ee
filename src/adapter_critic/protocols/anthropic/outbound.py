"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A stage call's OpenAI chat-completions body as an Anthropic Messages request (the upstream side).

- `system` and `developer` messages go, in order, to the top-level `system`;
- an assistant's `tool_calls` become `tool_use` blocks (arguments parsed from their JSON string), `tool`
  messages `tool_result` blocks; consecutive turns of one role are merged into one (the API wants the tool
  results of one assistant turn together in the user turn that follows it);
- image parts become `image` blocks (a `data:` URL as base64, any other URL by reference);
- `max_tokens` (required there) comes from the body (the request's, else the target's options), else from
  `[protocols.anthropic] max_tokens`; `stop` becomes `stop_sequences`; `temperature`, `top_p`, `tools`,
  `tool_choice` (with `parallel_tool_calls = false` as `disable_parallel_tool_use`) and `user` are translated;
  other OpenAI options (`n`, `seed`, `response_format`, penalties…) have no Messages counterpart and are left out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import RequestError
from . import wire


class _ImageURL(msgspec.Struct):
    url: str


class _Part(msgspec.Struct):
    type: str
    text: str | None = None
    image_url: _ImageURL | str | None = None


class _Function(msgspec.Struct):
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class _ToolCall(msgspec.Struct):
    id: str = ""
    function: _Function = msgspec.field(default_factory=_Function)


class _ChatMessage(msgspec.Struct):
    role: str
    content: str | list[_Part] | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


_EMPTY_SCHEMA = msgspec.Raw(b'{"type":"object","properties":{}}')


class _FunctionDef(msgspec.Struct):
    name: str
    description: str | None = None
    # Passed on as sent (a tool's schema can be large: never decoded into Python objects).
    parameters: msgspec.Raw = _EMPTY_SCHEMA


class _ChatTool(msgspec.Struct):
    function: _FunctionDef
    type: str = "function"


class _NamedFunction(msgspec.Struct):
    name: str


class _NamedChoice(msgspec.Struct):
    function: _NamedFunction


class _ChatBody(msgspec.Struct):
    """The fields of a chat-completions body that have a Messages counterpart."""

    model: str
    messages: list[_ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[_ChatTool] | None = None
    tool_choice: str | _NamedChoice | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None


class _Tool(msgspec.Struct, omit_defaults=True):
    name: str
    input_schema: msgspec.Raw  # a chat tool's `parameters`, passed on as sent
    description: str | None = None


class _Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    model: str
    messages: list[wire.MessageParam]
    max_tokens: int
    system: str | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[_Tool] | None = None
    tool_choice: wire.ToolChoice | None = None
    metadata: wire.Metadata | None = None
    stream: bool | None = None


_encoder = msgspec.json.Encoder()
_body_decoder = msgspec.json.Decoder(_ChatBody)


def messages_request(body: dict[str, Any], *, stream: bool, default_max_tokens: int) -> bytes:
    """The Messages request body for an OpenAI chat-completions `body` (raw JSON values allowed in it)."""
    try:
        chat = _body_decoder.decode(_encoder.encode(body))
    except msgspec.ValidationError as exc:
        raise RequestError(f"The request cannot be sent to an Anthropic Messages target: {exc}.") from None
    system, messages = _conversation(chat.messages)
    request = _Request(
        model=chat.model,
        messages=messages,
        max_tokens=chat.max_tokens or chat.max_completion_tokens or default_max_tokens,
        system=system,
        stop_sequences=[chat.stop] if isinstance(chat.stop, str) else chat.stop or None,
        temperature=chat.temperature,
        top_p=chat.top_p,
        tools=[_tool(tool) for tool in chat.tools] if chat.tools else None,
        tool_choice=_tool_choice(chat.tool_choice, chat.parallel_tool_calls) if chat.tools else None,
        metadata=wire.Metadata(user_id=chat.user) if chat.user else None,
        stream=True if stream else None,
    )
    return _encoder.encode(request)


def _conversation(messages: list[_ChatMessage]) -> tuple[str | None, list[wire.MessageParam]]:
    """The system text and the alternating turns of a chat-completions `messages`."""
    system: list[str] = []
    turns: list[wire.MessageParam] = []
    for message in messages:
        if message.role in ("system", "developer"):
            text = _text(message.content)
            if text:
                system.append(text)
            continue
        if message.role == "tool":
            blocks: list[wire.Block] = [wire.ToolResultBlock(message.tool_call_id or "", _text(message.content))]
            role = "user"
        elif message.role == "assistant":
            blocks = _assistant_blocks(message)
            role = "assistant"
        else:
            blocks = _user_blocks(message.content)
            role = "user"
        if not blocks:
            continue  # the API refuses empty turns (an assistant turn that said nothing)
        if turns and turns[-1].role == role:
            previous = turns[-1].content
            assert isinstance(previous, list)
            previous.extend(blocks)
        else:
            turns.append(wire.MessageParam(role=role, content=blocks))  # type: ignore[arg-type]
    return ("\n\n".join(system) or None), turns


def _text(content: str | list[_Part] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(part.text for part in content if part.text is not None)


def _user_blocks(content: str | list[_Part] | None) -> list[wire.Block]:
    if content is None or isinstance(content, str):
        return [wire.TextBlock(content)] if content else []
    blocks: list[wire.Block] = []
    for part in content:
        if part.type == "text" and part.text:
            blocks.append(wire.TextBlock(part.text))
        elif part.type == "image_url" and part.image_url is not None:
            url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
            blocks.append(wire.ImageBlock(_image_source(url)))
    return blocks


def _image_source(url: str) -> wire.ImageSource:
    """`data:image/png;base64,…` as a base64 source; any other URL by reference."""
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return wire.ImageSource(type="base64", media_type=head[5:] or "image/png", data=data)
    return wire.ImageSource(type="url", url=url)


def _assistant_blocks(message: _ChatMessage) -> list[wire.Block]:
    text = _text(message.content)
    blocks: list[wire.Block] = [wire.TextBlock(text)] if text else []
    for call in message.tool_calls or ():
        blocks.append(wire.ToolUseBlock(call.id, call.function.name, _arguments(call.function.arguments)))
    return blocks


def _arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """A tool call's JSON-string arguments as the object `tool_use.input` must be."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        parsed = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {"arguments": arguments}  # not JSON: kept, so the conversation still says what was called
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _tool(tool: _ChatTool) -> _Tool:
    schema = tool.function.parameters
    if bytes(schema).strip() == b"null":
        schema = _EMPTY_SCHEMA
    return _Tool(name=tool.function.name, input_schema=schema, description=tool.function.description)


def _tool_choice(choice: str | _NamedChoice | None, parallel: bool | None) -> wire.ToolChoice | None:
    single = True if parallel is False else None
    if isinstance(choice, _NamedChoice):
        return wire.ToolChoice(type="tool", name=choice.function.name, disable_parallel_tool_use=single)
    if choice == "none":
        return wire.ToolChoice(type="none")
    if choice == "required":
        return wire.ToolChoice(type="any", disable_parallel_tool_use=single)
    if choice == "auto" or single:
        return wire.ToolChoice(type="auto", disable_parallel_tool_use=single)
    return None
