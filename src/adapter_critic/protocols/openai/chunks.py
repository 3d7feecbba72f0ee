"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI `chat.completion.chunk`: the stream a client gets (docs/guides/streaming.md), and an
upstream's chunk as it is read.

`ChunkWriter` writes the stream: relayed upstream chunks with our ids, a known answer cut into chunks, and the
tail — the finish chunk, the usage chunk when asked for, `[DONE]`. The `adapter_critic` extension rides on exactly
one chunk: the last before `[DONE]`. No chunk but the usage chunk carries a non-null `usage`.

`Chunk` is the one view of an upstream chunk (`chunk_decoder`): the fields the relay (`pipeline.relay`) and the
other protocols' stream renderers read, and no others, so the rest passes through untouched and costs nothing.
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import msgspec

from ...core import Answer, Usage
from ...errors import Rendered
from ...errorwire import ErrorObject
from ...events import AnswerChunks, RunRecord, extension, payloads_of
from . import shape
from .shape import Shape

KEEPALIVE = b": keep-alive\n\n"
DONE_EVENT = b"data: [DONE]\n\n"
# Text synthesised into chunks (adapter answers, degraded drafts) is cut into pieces of this many characters.
_PIECE = 512

_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encoder = msgspec.json.Encoder()
_ID_KEYS = ("id", "object", "created", "model")  # the fields every chunk gets from us, in this order
_OBJECT = b'"chat.completion.chunk"'


def event(payload: Any) -> bytes:
    """One SSE `data:` event holding `payload` as JSON."""
    return b"".join((b"data: ", _encoder.encode(payload), b"\n\n"))  # one copy of a big payload, not two


def raw_event(payload: bytes) -> bytes:
    return b"".join((b"data: ", payload, b"\n\n"))


# A relayed chunk at least this long is spliced from a view of its bytes: a slice would copy them once more.
_VIEW_FROM = 1 << 16


class ChunkWriter:
    """Renders one response's chunks; every chunk gets the same id, created and served model (the OpenAI
    protocol's `StreamRenderer`)."""

    keepalive = KEEPALIVE

    def __init__(self, *, completion_id: str, served_model: str, include_usage: bool) -> None:
        self.completion_id, self.served_model, self.include_usage = completion_id, served_model, include_usage
        self.created = int(time.time())
        ids = _encoder.encode(completion_id), _OBJECT, b"%d" % self.created, _encoder.encode(served_model)
        self._ids = {key: msgspec.Raw(raw) for key, raw in zip(_ID_KEYS, ids, strict=True)}
        self._leading = b'{"id":%s,"object":%s,"created":%s,"model":%s,' % ids
        self._upstream_leading: bytes | None = None  # what the upstream's chunks begin with (`_leading`)
        self._learned = False  # the first relayed chunk said what that is (or that it has no such beginning)
        self._shape_from: Shape | None = None  # `spliced`'s upstream shape, ours for it, and our tail and head
        self._shape_to: Shape | None = None
        self._between = b""

    def relayed(self, payloads: list[bytes]) -> bytes:
        """Upstream chunks with our id, created and model, and without the upstream's usage.

        Most servers begin every chunk of a stream with the same `{"id":…,"object":…,"created":…,"model":…,`
        (`_leading`, learnt from the first chunk): a chunk that begins with the bytes the first one did, and has no
        `"usage"` anywhere but a `null` one at its end (`_no_usage`), gets ours in their place and the rest of its
        bytes untouched — a JSON string cannot hold a bare `"`, so those bytes are the four top-level fields. Any
        other chunk is decoded, rewritten and encoded whole."""
        events = []
        for payload in payloads:
            if not self._learned:
                self._learn(payload)
            leading = self._upstream_leading
            if leading is not None and payload.startswith(leading) and _no_usage(payload):
                n = len(leading)
                rest = payload[n:] if len(payload) < _VIEW_FROM else memoryview(payload)[n:]
                events.append(b"".join((b"data: ", self._leading, rest, b"\n\n")))
            else:
                events.append(raw_event(_encoder.encode(self._rewrite(payload))))
        return b"".join(events)

    def spliced(self, chunks: AnswerChunks) -> bytes:
        """A read of whole upstream token chunks of the upstream's shape (`events.AnswerChunks.raw`, their texts in
        `bodies`), or a `part` of one big chunk, with our head and tail around the text: our id, created and model,
        and no usage (`_rewrite`), made once per shape."""
        raw, upstream = chunks.raw, chunks.shape
        assert raw is not None
        if upstream is not self._shape_from:
            self._shape_from = upstream
            self._shape_to = shape.rewritten(upstream, lambda chunk: _encoder.encode(self._rewrite(chunk)))
            self._between = b"" if self._shape_to is None else self._shape_to[1] + self._shape_to[0]
        ours = self._shape_to
        if chunks.part:
            return _piece(raw, upstream, ours, chunks.part)
        if ours is None or chunks.bodies is None:  # not a shape whose text is in `choices`: rewritten as any chunk
            return self.relayed(payloads_of(raw))
        return b"".join((ours[0], self._between.join(chunks.bodies), ours[1]))

    def answer(self, answer: Answer) -> bytes:
        """A known answer (an adapter's, a degraded draft) as chunks: role, text in pieces, tool calls."""
        events = [event(self._chunk({"role": "assistant", "content": ""}))]
        text = answer.content or ""
        for start in range(0, len(text), _PIECE):
            events.append(event(self._chunk({"content": text[start : start + _PIECE]})))
        if answer.tool_calls:
            calls = [{"index": i, **c} if isinstance(c, dict) else c for i, c in enumerate(answer.tool_calls)]
            events.append(event(self._chunk({"tool_calls": calls})))
        return b"".join(events)

    def tail(self, record: RunRecord, finish: bytes | None) -> bytes:
        """The finish chunk (the upstream's, rewritten, when it sent one), the usage chunk when the client asked
        for it, then `[DONE]`; the extension on the last chunk before `[DONE]`."""
        ext = extension(record)
        if finish is None:
            finish_fields = self._chunk({}, finish_reason=record.answer.finish_reason or "stop")
        else:
            finish_fields = self._rewrite(finish)
        if not self.include_usage:
            finish_fields["adapter_critic"] = ext
            return b"".join((b"data: ", _encoder.encode(finish_fields), b"\n\n", DONE_EVENT))
        usage_chunk = self._chunk(None)
        usage_chunk["usage"] = ext.tokens.total
        usage_chunk["adapter_critic"] = ext
        return b"".join((event(finish_fields), b"data: ", _encoder.encode(usage_chunk), b"\n\n", DONE_EVENT))

    def progress(self, stage: str, ok: bool, elapsed_ms: float) -> bytes:
        """A chunk with an empty delta saying that an earlier stage finished (for clients that asked)."""
        chunk = self._chunk({})
        chunk["adapter_critic"] = {"progress": {"stage": stage, "status": "ok" if ok else "failed", "ms": elapsed_ms}}
        return event(chunk)

    def error_event(self, rendered: Rendered) -> bytes:
        """The error envelope as the stream's last event (no `[DONE]` after it: the stream did not finish)."""
        return raw_event(rendered.body)

    def _learn(self, payload: bytes) -> None:
        """What the upstream's chunks begin with, from its first (once: a stream without such a beginning is not
        searched for it per chunk). Read off the chunk's first bytes when they are plain (`_leading_prefix`), so
        one big chunk is not decoded whole for it; else from the decoded chunk."""
        self._learned = True
        leading = _leading_prefix(payload)
        self._upstream_leading = leading if leading is not None else _leading(payload, _fields_decoder.decode(payload))

    def _rewrite(self, payload: bytes) -> dict[str, Any]:
        fields: dict[str, Any] = _fields_decoder.decode(payload)
        fields.update(self._ids)
        fields.pop("usage", None)
        return fields

    def _chunk(self, delta: dict[str, Any] | None, finish_reason: str | None = None) -> dict[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.served_model,
            "choices": choices,
        }


def _piece(raw: bytes, upstream: Shape, ours: Shape | None, part: int) -> bytes:
    """A piece of one big chunk (`ChunkWriter.spliced`): its beginning with our head, its end with our tail, and its
    middle as it came. Pieces are framed by what is in `choices` (`shape.opening`), so `ours` is always known."""
    if ours is None or part == 2:
        return raw
    if part == 1:
        return b"".join((ours[0], memoryview(raw)[len(upstream[0]) :]))
    return b"".join((memoryview(raw)[: len(raw) - len(upstream[1])], ours[1]))


def _leading(payload: bytes, fields: dict[str, msgspec.Raw]) -> bytes | None:
    """The bytes `payload` begins with when its first four fields are `id`, `object`, `created` and `model` (in any
    order, compact or with a space after each `:` and `,`), up to the next field; else None."""
    first = list(itertools.islice(fields.items(), 4))
    if len(fields) <= 4 or {key for key, _ in first} != set(_ID_KEYS):
        return None
    # Compact or spaced, as the first field's colon says (a value never begins with a space).
    head = b'{"%s":' % first[0][0].encode()
    colon, comma = (b": ", b", ") if payload.startswith(b" ", len(head)) else (b":", b",")
    leading = b"{" + b"".join(b'"%s"%s%s%s' % (key.encode(), colon, bytes(raw), comma) for key, raw in first)
    return leading if payload.startswith(leading) else None


# How OpenAI ends every chunk of a stream whose usage was asked for, compact or spaced: a client may see it.
_NULL_USAGE = (b',"usage":null}', b', "usage": null}')


# The same search as `bytes.find`, for a big chunk: the regular expression engine looks for the `"` first, and was
# 2.5 times faster on 16 MiB of prose (0.28 against 0.73 ms per MiB), 1.25 on text full of quotes.
_USAGE_KEY = re.compile(rb'"usage"')


def _no_usage(payload: bytes) -> bool:
    """Whether `payload` has no usage to take out: no `"usage"` anywhere, or only the `null` one it ends with."""
    if len(payload) < _VIEW_FROM:
        at = payload.find(b'"usage"')
    else:
        found = _USAGE_KEY.search(payload)
        at = -1 if found is None else found.start()
    if at < 0:
        return True
    for end in _NULL_USAGE:
        if payload.endswith(end):
            return at == len(payload) - len(end) + end.index(b'"')
    return False


# The four leading fields, each with a string or integer value and the comma after it, then another field
# (`_leading_prefix`): per field its name, the colon and the comma as written.
_FIELD = rb'"(id|object|created|model)"(: ?)(?:"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*"|-?[0-9]+)(, ?)'
_FOUR_FIELDS = re.compile(rb"\{" + _FIELD * len(_ID_KEYS) + rb'(?=")')
_STYLES = (({b":"}, {b","}), ({b": "}, {b", "}))  # compact, or a space after every `:` and `,`


def _leading_prefix(payload: bytes) -> bytes | None:
    """What `_leading` finds, read off the first bytes alone (one match, 2 µs, where decoding even a small chunk
    takes 4): the four fields in any order, each value a string or an integer, all compact or all with a space after
    `:` and `,`, then another field. None where it cannot tell (`_leading` then decodes the chunk)."""
    found = _FOUR_FIELDS.match(payload)
    if found is None:
        return None
    parts = found.groups()
    names, colons, commas = set(parts[0::3]), set(parts[1::3]), set(parts[2::3])
    if len(names) != len(_ID_KEYS) or (colons, commas) not in _STYLES:
        return None
    return payload[: found.end()]


# -- an upstream chunk, as read ---------------------------------------------------------------------------
class Delta(msgspec.Struct):
    content: str | None = None
    # Left raw: the relay only asks whether there are any (and passes on what it is sent); a renderer that reads
    # them reads each with `tool_calls`.
    tool_calls: list[msgspec.Raw] | None = None
    refusal: str | None = None
    reasoning_content: str | None = None  # vLLM, DeepSeek, llama.cpp
    reasoning: str | None = None  # the same, as other servers name it


class ChunkChoice(msgspec.Struct):
    index: int = 0
    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct):
    """The fields of an upstream `chat.completion.chunk` that are read; the rest passes through untouched."""

    choices: list[ChunkChoice] = []
    usage: Usage | None = None
    error: ErrorObject | None = None  # an error event, `{"error": {"message": ...}}`


class FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct):
    """One of a delta's `tool_calls`: which call it continues (`index`), and its id, name and arguments so far."""

    index: int = 0
    id: str | None = None
    function: FunctionDelta | None = None


chunk_decoder = msgspec.json.Decoder(Chunk)
_tool_call_decoder = msgspec.json.Decoder(ToolCallDelta)


def tool_calls(delta: Delta) -> list[ToolCallDelta]:
    """A delta's tool calls as read (`ToolCallDelta`); one that is not a tool call's delta is left out."""
    calls = []
    for raw in delta.tool_calls or ():
        try:
            calls.append(_tool_call_decoder.decode(raw))
        except msgspec.ValidationError:  # malformed: relayed as sent to a chunk stream, left out of other streams
            continue
    return calls
