"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The Responses API's event stream for one streamed run: the upstream's `chat.completion.chunk`s (or an answer
known whole) turned into typed events, each an SSE `event:` / `data:` pair with its `sequence_number`.

The sequence: `response.created` and `response.in_progress` with the first thing sent; per output item
`response.output_item.added`, then for a message `response.content_part.added`, `response.output_text.delta`…,
`response.output_text.done`, `response.content_part.done`, and for a function call
`response.function_call_arguments.delta`… and `.done`, for the model's reasoning (where the upstream streams it)
`response.reasoning_text.delta`… and `.done`; `response.output_item.done`; and last
`response.completed` (`response.incomplete` on a length stop) carrying the whole response, its usage and the
`adapter_critic` extension. Items follow one another: the next one is added once the one before is done.

A failure after the stream started ends it with an `error` event and `response.failed`. Stage progress (for
clients that asked, `x_adapter_critic.progress`) goes out as `response.in_progress` events carrying
`adapter_critic.progress`. The writer only renders; the SSE transport (keep-alives, disconnects) is
`http.stream.StreamResponse`'s.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ...core import Answer
from ...errors import Rendered
from ...errorwire import ErrorObject, read_error_body
from ...events import RunRecord
from ..openai.chunks import KEEPALIVE, chunk_decoder, tool_calls
from .inbound import Echo
from .outbound import call_item, finished, new_id, reasoning_of, response_of, stop_status
from .wire import (
    ArgumentsDelta,
    ArgumentsDone,
    Completed,
    Created,
    Error,
    Failed,
    FunctionCallItem,
    Incomplete,
    InProgress,
    ItemAdded,
    ItemDone,
    MessageItem,
    OutputItem,
    OutputText,
    PartAdded,
    PartDone,
    ReasoningDelta,
    ReasoningDone,
    ReasoningItem,
    ReasoningText,
    Response,
    ResponseError,
    Status,
    StreamEvent,
    TextDelta,
    TextDone,
)

_encoder = msgspec.json.Encoder()


class _Call:
    """A function call being streamed: its item, where it sits in the output, its arguments so far."""

    __slots__ = ("arguments", "done", "index", "item")

    def __init__(self, item: FunctionCallItem, index: int) -> None:
        self.item, self.index = item, index
        self.arguments: list[str] = []
        self.done = False


class ResponsesEvents:
    """Renders one streamed response's events (a `protocols.base.StreamRenderer`)."""

    keepalive = KEEPALIVE

    def __init__(self, *, response_id: str, served_model: str, echo: Echo) -> None:
        self.response_id, self.served_model, self.echo = response_id, served_model, echo
        self.created_at = int(time.time())
        self.output: list[OutputItem] = []
        self._sequence = 0
        self._opened = False
        self._message: MessageItem | None = None  # the message item being streamed
        self._text: list[str] = []
        self._reasoning: ReasoningItem | None = None  # the reasoning item being streamed
        self._thoughts: list[str] = []
        self._calls: dict[int, _Call] = {}  # by the upstream's tool-call index
        self._current: _Call | None = None  # the function call being streamed

    # -- what the stream writer calls -----------------------------------------------------------------------
    def relayed(self, payloads: list[bytes]) -> bytes:
        """The events for upstream chunks of the final answer (the first choice's text and tool calls)."""
        out = self._open()
        for payload in payloads:
            out += self._chunk(payload)
        return out

    def answer(self, answer: Answer) -> bytes:
        """The events for an answer known whole (an adapter's, a degraded draft): its text, then its calls."""
        out = self._open()
        reasoning = reasoning_of(answer)
        if reasoning:
            out += self._reasoning_delta(reasoning)
        if answer.content:
            out += self._text_delta(answer.content)
        for call in answer.tool_calls or ():
            item = call_item(call, "in_progress")
            if item is not None:
                index = len(self._calls)
                out += self._start_call(index, item.call_id, item.name)
                out += self._arguments(index, item.arguments)
        return out

    def tail(self, record: RunRecord, finish: bytes | None) -> bytes:
        """The finish chunk's own deltas, every item still open closed, then `response.completed` (or
        `response.incomplete`) with the whole response, its usage and the extension."""
        out = self._open()
        if finish is not None:
            out += self._chunk(finish)
        if not any(isinstance(item, MessageItem | FunctionCallItem) for item in self.output):
            out += self._open_message()  # an empty answer is still a message, as in a plain answer
        status, _ = stop_status(record.answer.finish_reason)
        out += self._close(status)
        response = finished(
            record, self.echo, response_id=self.response_id, created_at=self.created_at, output=self.output
        )
        event = Incomplete if response.status == "incomplete" else Completed
        return out + self._event(event(sequence_number=self._next(), response=response))

    def progress(self, stage: str, ok: bool, elapsed_ms: float) -> bytes:
        """A `response.in_progress` event saying that an earlier stage finished (for clients that asked)."""
        out = self._open()
        event = InProgress(sequence_number=self._next(), response=self._snapshot("in_progress"))
        fields: dict[str, Any] = msgspec.to_builtins(event)
        fields["adapter_critic"] = {"progress": {"stage": stage, "status": "ok" if ok else "failed", "ms": elapsed_ms}}
        return out + _sse("response.in_progress", _encoder.encode(fields))

    def error_event(self, rendered: Rendered) -> bytes:
        """The end of a stream that failed after it started: an `error` event, then `response.failed`."""
        parsed = read_error_body(rendered.body)
        error = parsed.error if parsed is not None else ErrorObject()
        message = error.message if error.message is not None else "The request failed."
        code = str(error.code) if error.code is not None else error.type
        out = self._open()
        out += self._event(Error(sequence_number=self._next(), code=code, message=message, param=error.param))
        response = self._snapshot("failed")
        kind = "rate_limit_exceeded" if rendered.status == 429 else "server_error"
        response.error = ResponseError(code=kind, message=message, type=error.type, param=error.param)
        return out + self._event(Failed(sequence_number=self._next(), response=response))

    # -- items ----------------------------------------------------------------------------------------------
    def _chunk(self, payload: bytes) -> bytes:
        try:
            chunk = chunk_decoder.decode(payload)
        except msgspec.DecodeError:  # the relay read it as a chunk already: cannot happen
            return b""
        out = b""
        for choice in chunk.choices:
            delta = choice.delta
            if choice.index != 0 or delta is None:
                continue  # a response has one answer (`n` is a chat-completions setting)
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                out += self._reasoning_delta(thought)
            if delta.content:
                out += self._text_delta(delta.content)
            for call in tool_calls(delta) if delta.tool_calls else ():
                if call.index not in self._calls:
                    name = call.function.name if call.function is not None else None
                    out += self._start_call(call.index, call.id, name)
                if call.function is not None and call.function.arguments:
                    out += self._arguments(call.index, call.function.arguments)
        return out

    def _text_delta(self, text: str) -> bytes:
        out = b"" if self._message is not None else self._open_message()
        message = self._message
        assert message is not None
        self._text.append(text)
        return out + self._event(
            TextDelta(
                sequence_number=self._next(), item_id=message.id, output_index=self._index, content_index=0, delta=text
            )
        )

    def _reasoning_delta(self, text: str) -> bytes:
        out = b""
        if self._reasoning is None:
            out += self._close("completed")
            self._reasoning = ReasoningItem(id=new_id("rs"), content=[], status="in_progress")
            self.output.append(self._reasoning)
            out += self._event(ItemAdded(sequence_number=self._next(), output_index=self._index, item=self._reasoning))
        self._thoughts.append(text)
        delta = ReasoningDelta(
            sequence_number=self._next(),
            item_id=self._reasoning.id,
            output_index=self._index,
            content_index=0,
            delta=text,
        )
        return out + self._event(delta)

    def _open_message(self) -> bytes:
        out = self._close("completed")
        self._message = MessageItem(id=new_id("msg"), status="in_progress", content=[])
        self.output.append(self._message)
        out += self._event(ItemAdded(sequence_number=self._next(), output_index=self._index, item=self._message))
        return out + self._event(
            PartAdded(
                sequence_number=self._next(),
                item_id=self._message.id,
                output_index=self._index,
                content_index=0,
                part=OutputText(""),
            )
        )

    def _start_call(self, index: int, call_id: str | None, name: str | None) -> bytes:
        out = self._close("completed")
        item = FunctionCallItem(
            id=new_id("fc"), call_id=call_id or new_id("call"), name=name or "", arguments="", status="in_progress"
        )
        self.output.append(item)
        self._current = self._calls[index] = _Call(item, len(self.output) - 1)
        return out + self._event(ItemAdded(sequence_number=self._next(), output_index=self._index, item=item))

    def _arguments(self, index: int, delta: str) -> bytes:
        call = self._calls[index]
        call.arguments.append(delta)
        if call.done:  # an upstream that went back to an earlier call: its arguments still count
            call.item.arguments = "".join(call.arguments)
            return b""
        return self._event(
            ArgumentsDelta(sequence_number=self._next(), item_id=call.item.id, output_index=call.index, delta=delta)
        )

    def _close(self, status: Status) -> bytes:
        """Finish the item being streamed (reasoning, a message or a function call), if any."""
        out = b""
        if self._reasoning is not None:
            thought, self._reasoning = self._reasoning, None
            text, self._thoughts = "".join(self._thoughts), []
            index = self.output.index(thought)
            thought.content, thought.status = [ReasoningText(text)], "completed"
            done = ReasoningDone(
                sequence_number=self._next(), item_id=thought.id, output_index=index, content_index=0, text=text
            )
            out += self._event(done)
            out += self._event(ItemDone(sequence_number=self._next(), output_index=index, item=thought))
        if self._message is not None:
            message, self._message = self._message, None
            text, self._text = "".join(self._text), []
            item_id, index = message.id, self.output.index(message)
            part = OutputText(text)
            message.status, message.content = status, [part]
            text_done = TextDone(
                sequence_number=self._next(), item_id=item_id, output_index=index, content_index=0, text=text
            )
            out += self._event(text_done)
            part_done = PartDone(
                sequence_number=self._next(), item_id=item_id, output_index=index, content_index=0, part=part
            )
            out += self._event(part_done)
            out += self._event(ItemDone(sequence_number=self._next(), output_index=index, item=message))
        if self._current is not None:
            call, self._current = self._current, None
            item = call.item
            call.done = True
            item.arguments, item.status = "".join(call.arguments), status
            args = ArgumentsDone(
                sequence_number=self._next(), item_id=item.id, output_index=call.index, arguments=item.arguments
            )
            out += self._event(args)
            out += self._event(ItemDone(sequence_number=self._next(), output_index=call.index, item=item))
        return out

    # -- framing --------------------------------------------------------------------------------------------
    @property
    def _index(self) -> int:
        return len(self.output) - 1

    def _open(self) -> bytes:
        """`response.created` and `response.in_progress`, with the first thing the stream sends."""
        if self._opened:
            return b""
        self._opened = True
        created = self._event(Created(sequence_number=self._next(), response=self._snapshot("in_progress")))
        return created + self._event(InProgress(sequence_number=self._next(), response=self._snapshot("in_progress")))

    def _snapshot(self, status: Status) -> Response:
        return response_of(
            self.echo,
            response_id=self.response_id,
            created_at=self.created_at,
            model=self.served_model,
            status=status,
            output=list(self.output),
        )

    def _next(self) -> int:
        sequence = self._sequence
        self._sequence += 1
        return sequence

    @staticmethod
    def _event(event: StreamEvent) -> bytes:
        return _sse(event.__struct_config__.tag, _encoder.encode(event))


def _sse(kind: Any, data: bytes) -> bytes:
    return b"event: " + str(kind).encode() + b"\ndata: " + data + b"\n\n"
