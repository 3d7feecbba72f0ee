"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Input items as chat messages: `input` (a string, or messages, `function_call`s and `function_call_output`s) and
`instructions`, as the `messages` every workflow reads.

- A message's `input_text` / `output_text` parts are text and `input_image` parts (a URL or a `data:` URL) chat
  `image_url` parts; a user message of one text part is a plain string, and assistant, system and developer
  content is joined into one string (what local chat templates expect).
- A `function_call` joins the assistant message right before it (the same turn's text) or the calls right before
  it, as that message's `tool_calls`; a `function_call_output` is a `tool` message.
- `reasoning` items sent back are dropped; `item_reference`s, file ids and other item or part types are refused.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ...errors import RequestError
from .wire import Item, Part

_ROLES = frozenset({"user", "assistant", "system", "developer"})


def messages_of(items: str | list[Item], instructions: str | None) -> list[dict[str, Any]]:
    """`input` (and `instructions`) as chat messages. A `function_call` joins the assistant message right before
    it (the text of the same turn) or the calls right before it: one assistant message per turn."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not items:
        raise RequestError("`input` must not be an empty array.", param="input")
    turn: dict[str, Any] | None = None  # the assistant message function calls join
    for index, item in enumerate(items):
        kind = item.type
        if kind == "message":
            role = item.role
            if role not in _ROLES:
                shown = "missing" if role is None else repr(role)
                raise RequestError(
                    f"`input[{index}].role` is {shown}; must be one of user, assistant, system, developer.",
                    param=f"input[{index}].role",
                )
            given = item.content
            content = given if isinstance(given, str) else _content(given, role, f"input[{index}].content")
            message = {"role": role, "content": content}
            messages.append(message)
            turn = message if role == "assistant" else None
        elif kind == "function_call":
            if not item.call_id or not item.name or item.arguments is None:
                _missing_call_field(item, index)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.output if item.output is not None else ""
            if not item.call_id:
                missing(f"input[{index}].call_id")
            if not isinstance(output, str):
                output = _text(output, f"input[{index}].output")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
            turn = None
        elif kind == "reasoning":
            continue  # an earlier answer's reasoning, sent back: a chat model takes none
        elif kind == "item_reference":
            raise RequestError(
                f"`input[{index}]`: item references are not supported: this server keeps no items. Send the item "
                "itself.",
                param=f"input[{index}].type",
            )
        else:
            raise RequestError(
                f"`input[{index}].type` {kind!r} is not supported; input items are messages, function_call and "
                "function_call_output (reasoning items are accepted and dropped).",
                param=f"input[{index}].type",
            )
    return messages


def _missing_call_field(item: Item, index: int) -> NoReturn:
    for name in ("call_id", "name"):
        if not getattr(item, name):
            missing(f"input[{index}].{name}")
    missing(f"input[{index}].arguments")


def _content(content: list[Part] | None, role: str, where: str) -> str | list[dict[str, Any]]:
    """A message's content parts for a chat model: a string, or (user messages with images, or several parts) a
    list of chat content parts. Assistant, system and developer content is text, joined into one string."""
    if content is None:
        raise RequestError(f"`{where}` is required: a string or an array of content parts.", param=where)
    if role != "user":
        return _text(content, where)
    parts = [_part(part, f"{where}[{index}]") for index, part in enumerate(content)]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _part(part: Part, where: str) -> dict[str, Any]:
    if part.type in ("input_text", "output_text"):
        return {"type": "text", "text": required(part.text, f"{where}.text", empty=True)}
    if part.type == "input_image":
        if part.image_url is None:
            why = "file ids need stored files, which this server keeps none of" if part.file_id else "it is missing"
            raise RequestError(
                f"`{where}.image_url` is required ({why}): give the image as a URL or a `data:` URL.",
                param=f"{where}.image_url",
            )
        image: dict[str, Any] = {"url": part.image_url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    raise RequestError(
        f"`{where}.type` {part.type!r} is not supported; content parts are input_text and input_image.",
        param=f"{where}.type",
    )


def _text(parts: list[Part], where: str) -> str:
    """Text parts (`input_text`, `output_text`, `refusal`) joined into one string; anything else is refused."""
    texts: list[str] = []
    for index, part in enumerate(parts):
        if part.type in ("input_text", "output_text", "text"):
            texts.append(required(part.text, f"{where}[{index}].text", empty=True))
        elif part.type == "refusal":
            texts.append(part.refusal or "")
        else:
            raise RequestError(
                f"`{where}[{index}].type` {part.type!r} is not supported here: only text parts.",
                param=f"{where}[{index}].type",
            )
    return "".join(texts)


def required(value: str | None, where: str, *, empty: bool = False) -> str:
    if value is None or (not value and not empty):
        return missing(where)
    return value


def missing(where: str) -> NoReturn:
    raise RequestError(f"`{where}` is required.", param=where)
