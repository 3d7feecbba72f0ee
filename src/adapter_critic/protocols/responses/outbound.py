"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A finished run as the Responses API's `response` object: the answer as output items, the status a stop gives,
usage in the Responses names, the request's settings echoed, and the `adapter_critic` extension.

- The model's reasoning, where its upstream gave it (`reasoning_content` / `reasoning`), is a `reasoning` item
  first, with one `reasoning_text` part.
- The answer's text is one `message` item with one `output_text` part (left out when the model only called
  tools); each tool call is a `function_call` item with `call_id`, `name` and `arguments`.
- A `length` stop is `status: "incomplete"` with `incomplete_details.reason = "max_output_tokens"`
  (`content_filter` likewise); any other stop is `completed`.
- `usage` is the run's total over every stage (the extension's `tokens.total`): `input_tokens`,
  `output_tokens`, `total_tokens`, with `cached_tokens`, `cache_write_tokens` and `reasoning_tokens` from the
  upstreams' details.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ... import ids
from ...core import Answer, Completion, Usage
from ...events import Extension, RunRecord, extension
from .inbound import Echo
from .wire import (
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    MessageItem,
    OutputItem,
    OutputText,
    OutputTokensDetails,
    ReasoningItem,
    ReasoningText,
    Response,
    ResponseError,
    ResponseUsage,
    Status,
)

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_encoder = msgspec.json.Encoder()
_completion_decoder = msgspec.json.Decoder(Completion)


def new_id(prefix: str) -> str:
    """An id in the Responses API's style: `resp_…`, `msg_…`, `fc_…`."""
    return ids.new_id(f"{prefix}_")


def stop_status(finish_reason: str | None) -> tuple[Status, IncompleteDetails | None]:
    """The response's status for a chat `finish_reason`, with why it is incomplete when it is."""
    reason = _INCOMPLETE.get(finish_reason or "")
    return ("completed", None) if reason is None else ("incomplete", IncompleteDetails(reason))


def usage_of(total: Usage) -> ResponseUsage:
    """A run's total usage in the Responses names (details nobody reported count zero)."""
    return ResponseUsage(
        input_tokens=total.prompt_tokens,
        input_tokens_details=InputTokensDetails(
            _detail(total.prompt_tokens_details, "cached_tokens"),
            _detail(total.prompt_tokens_details, "cache_write_tokens"),
        ),
        output_tokens=total.completion_tokens,
        output_tokens_details=OutputTokensDetails(_detail(total.completion_tokens_details, "reasoning_tokens")),
        total_tokens=total.total_tokens,
    )


def _detail(details: dict[str, Any] | msgspec.UnsetType | None, key: str) -> int:
    value = details.get(key) if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def call_item(call: Any, status: Status = "completed") -> FunctionCallItem | None:
    """A chat tool call (`{"id", "function": {"name", "arguments"}}`) as a `function_call` item; None if it is
    not a function call."""
    if not isinstance(call, dict):
        return None
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = "" if arguments is None else _encoder.encode(arguments).decode()
    given = call.get("id")
    call_id = given if isinstance(given, str) and given else new_id("call")
    return FunctionCallItem(id=new_id("fc"), call_id=call_id, name=function["name"], arguments=arguments, status=status)


def reasoning_of(answer: Answer) -> str | None:
    """What the answering call's model thought, where its upstream said (never part of the answer's text)."""
    if answer.source is None:
        return None
    try:
        return _completion_decoder.decode(answer.source).reasoning or None
    except (msgspec.DecodeError, IndexError):  # the source was read as a completion already: cannot happen
        return None


def output_items(answer: Answer) -> list[OutputItem]:
    """The answer as output items: the model's reasoning (where its upstream gave it), its text as a message
    (unless the model only called tools), then its calls. A length stop makes the last item `incomplete` (as a
    stream ends the item it was writing)."""
    status, _ = stop_status(answer.finish_reason)
    items: list[OutputItem] = []
    reasoning = reasoning_of(answer)
    if reasoning:
        items.append(ReasoningItem(id=new_id("rs"), content=[ReasoningText(reasoning)]))
    calls = [item for item in map(call_item, answer.tool_calls or ()) if item is not None]
    if answer.content or not calls:
        text = [OutputText(answer.content or "")]
        items.append(MessageItem(id=new_id("msg"), status="completed" if calls else status, content=text))
    if calls:
        calls[-1].status = status
    items.extend(calls)
    return items


def response_of(
    echo: Echo,
    *,
    response_id: str,
    created_at: int,
    model: str,
    status: Status,
    output: list[OutputItem] | None = None,
    usage: ResponseUsage | None = None,
    incomplete: IncompleteDetails | None = None,
    error: ResponseError | None = None,
    ext: Extension | msgspec.UnsetType = msgspec.UNSET,
) -> Response:
    """The `response` object with the request's settings echoed."""
    return Response(
        id=response_id,
        created_at=created_at,
        status=status,
        error=error,
        incomplete_details=incomplete,
        instructions=echo.instructions,
        max_output_tokens=echo.max_output_tokens,
        model=model,
        output=output or [],
        parallel_tool_calls=echo.parallel_tool_calls,
        reasoning=echo.reasoning,
        temperature=echo.temperature,
        text=echo.text,
        tool_choice=echo.tool_choice,
        tools=echo.tools,
        top_p=echo.top_p,
        usage=usage,
        user=echo.user,
        metadata=echo.metadata,
        adapter_critic=ext,
    )


def finished(
    record: RunRecord, echo: Echo, *, response_id: str, created_at: int, output: list[OutputItem] | None = None
) -> Response:
    """A finished run's `response`: `output` when a stream built it as it went, else the record's answer's."""
    ext = extension(record)
    status, incomplete = stop_status(record.answer.finish_reason)
    return response_of(
        echo,
        response_id=response_id,
        created_at=created_at,
        model=record.served_model,
        status=status,
        output=output_items(record.answer) if output is None else output,
        usage=usage_of(ext.tokens.total),
        incomplete=incomplete,
        ext=ext,
    )


def body(record: RunRecord, echo: Echo, *, response_id: str) -> bytes:
    """A finished run as the JSON body of a plain (non-streamed) Responses answer."""
    return _encoder.encode(finished(record, echo, response_id=response_id, created_at=int(time.time())))
