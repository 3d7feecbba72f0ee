"""Input items as chat messages: `input` (a string, or messages, `function_call`s and `function_call_output`s) and
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
        where = f"input[{index}]"
        if item.type == "message":
            role = item.role
            if role not in _ROLES:
                shown = "missing" if role is None else repr(role)
                raise RequestError(
                    f"`{where}.role` is {shown}; must be one of user, assistant, system, developer.",
                    param=f"{where}.role",
                )
            message = {"role": role, "content": _content(item.content, role, f"{where}.content")}
            messages.append(message)
            turn = message if role == "assistant" else None
        elif item.type == "function_call":
            call = {
                "id": required(item.call_id, f"{where}.call_id"),
                "type": "function",
                "function": {
                    "name": required(item.name, f"{where}.name"),
                    "arguments": required(item.arguments, f"{where}.arguments", empty=True),
                },
            }
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(call)
        elif item.type == "function_call_output":
            output = item.output if item.output is not None else ""
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": required(item.call_id, f"{where}.call_id"),
                    "content": output if isinstance(output, str) else _text(output, f"{where}.output"),
                }
            )
            turn = None
        elif item.type == "reasoning":
            continue  # an earlier answer's reasoning, sent back: a chat model takes none
        elif item.type == "item_reference":
            raise RequestError(
                f"`{where}`: item references are not supported: this server keeps no items. Send the item itself.",
                param=f"{where}.type",
            )
        else:
            raise RequestError(
                f"`{where}.type` {item.type!r} is not supported; input items are messages, function_call and "
                "function_call_output (reasoning items are accepted and dropped).",
                param=f"{where}.type",
            )
    return messages


def _content(content: str | list[Part] | None, role: str, where: str) -> str | list[dict[str, Any]]:
    """A message's content for a chat model: a string, or (user messages with images, or several parts) a list of
    chat content parts. Assistant, system and developer content is text, joined into one string."""
    if content is None:
        raise RequestError(f"`{where}` is required: a string or an array of content parts.", param=where)
    if isinstance(content, str):
        return content
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
