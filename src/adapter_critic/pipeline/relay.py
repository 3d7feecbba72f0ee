"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Relay`: reading one streamed final call's upstream chunks and deciding what of them the client gets.

- Chunks go on as they arrive, those of one upstream read together (`AnswerChunks`).
- The chunk with `finish_reason` is kept back: the client gets it last, with the run's tail.
- Usage is the upstream's to report, the client's to get once: a chunk that only carries usage (with
  `choices: []`, or LiteLLM's `[{"index": 0, "delta": {}}]`) is counted and not relayed; an upstream that
  repeats its running usage on every chunk is counted once (the last report wins).
- Unless this is the run's first call, chunks with no answer content (the role chunk) wait until content
  follows, so a call that fails before any answer went out can still degrade to the draft.

Most chunks are not decoded as they pass. Once a chunk of answer text that says nothing else has been decoded, its
shape is known (`protocols.openai.shape`); from then on, while answer content flows, a read of whole events
(`upstream.sse.iter_batches(whole=True)`) that are all token chunks of that very shape goes on as it came
(`AnswerChunks.raw`) and only their text is kept, as JSON string bodies, decoded together in one call when the
answer's text is asked for (`answer`, `content`, or before a chunk that is decoded, to keep the order). Anything
else is decoded chunk by chunk, as the list above says. So a token whose text is not valid JSON string text reaches
the client before the stream ends with the error that says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..core import Answer, StageTarget, Usage
from ..events import AnswerChunks, payloads_of
from ..protocols.openai import shape
from ..protocols.openai.chunks import Chunk, Delta, ToolCallDelta, chunk_decoder, tool_calls
from ..redact import Secrets
from ..upstream.failures import bad_answer
from ..upstream.sse import Piece
from .stages import estimated

LEARN_TRIES = 4  # chunks of text decoded to learn their shape from, at most (a stream whose shape is not learnt)


@dataclass(slots=True)
class _Event:
    """An event arriving in pieces (`Relay._piece`): passed on, with the upstream's `shape` (its beginning up to the
    text, and `shape.CLOSING`), or held whole (an empty beginning). `held`: when held whole, its pieces; when passed
    on, what came after the text's closing quote (`closed`). `kept`: where its text begins in the relay's kept text."""

    shape: tuple[bytes, bytes]  # or `_WHOLE`, or `_UNREAD`
    held: list[bytes]
    kept: int
    closed: bool = False
    slashes: int = 0  # the backslashes the last piece ended with, inside the text


_WHOLE = (b"", b"")  # an `_Event` held whole
_UNREAD = (b"", b"\n")  # an `_Event` whose beginning is not all there yet


def _besides_text(delta: Delta | None) -> bool:
    """Whether a chunk's delta holds something besides text to act on: tool calls, a refusal, reasoning."""
    return delta is not None and bool(delta.tool_calls or delta.refusal or delta.reasoning_content or delta.reasoning)


class Relay:
    """One attempt at streaming the final call: feed it each upstream read's payloads, then `close` it."""

    def __init__(
        self,
        stage: str,
        target: StageTarget,
        *,
        first: bool,
        sink: Callable[[AnswerChunks], Awaitable[None]],
        secrets: Secrets,
    ) -> None:
        self.stage, self.target, self.first = stage, target, first
        self._sink, self._secrets = sink, secrets
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self._parts: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # the first choice's tool calls so far, by their index
        self._held: list[bytes] = []
        self._finish: bytes | None = None
        self._answering = False  # answer content went to the client
        self._shape: shape.Shape | None = None  # the upstream's token chunks' (`protocols.openai.shape`)
        self._tries = 0  # chunks its shape was looked for in
        self._kept: list[bytes] = []  # the text of reads passed on undecoded, not yet read (`_fold`)
        self._event: _Event | None = None  # an event arriving in pieces

    @property
    def content(self) -> str:
        """The answer's text so far: joined once, so that the stage's output and the answer are one string (the
        store sends it once: `store.wire`)."""
        self._fold()
        parts = self._parts
        if len(parts) == 1:
            return parts[0]
        text = "".join(parts)
        parts[:] = (text,)
        return text

    @property
    def reasoning(self) -> str:
        """The first choice's reasoning text, as the upstream streamed it (never part of the answer)."""
        self._fold()
        return "".join(self._reasoning)

    def answer(self) -> Answer:
        """The streamed answer as one: its text, its tool calls put together from their deltas, why it stopped."""
        content = self.content
        calls = [self._calls[index] for index in sorted(self._calls)] or None
        return Answer(content, calls, self.finish_reason or "stop")

    async def feed(self, batch: list[bytes] | bytes | Piece) -> None:
        """One upstream read: its payloads, or the read itself when it is whole events, or a piece of one event
        (`iter_batches`)."""
        if isinstance(batch, Piece):
            payload = await self._piece(batch)
            if payload is None:
                return
            batch = [payload]
        elif isinstance(batch, bytes):
            known = self._shape
            if known is not None and self._passing():
                bodies = shape.bodies(batch, known)
                if bodies is not None:
                    self._kept += bodies
                    await self._sink(
                        AnswerChunks(self.stage, [], usage=self.usage, raw=batch, shape=known, bodies=bodies)
                    )
                    return
            batch = payloads_of(batch)
        out: list[bytes] = []
        try:
            for payload in batch:
                self._take(payload, out)
        finally:  # what arrived before a broken chunk still goes out, ahead of the error
            if out:
                await self._sink(AnswerChunks(self.stage, out, usage=self.usage))

    async def _piece(self, piece: Piece) -> bytes | None:
        """A piece of an event (`Piece`): passed on, or held until the event is whole and then given back as its
        payload. An event passes when it begins as a chunk's first choice's content (`shape.opening`) while chunks
        pass at all: its text goes on as it comes and is kept, what follows the text is held; at its end the client
        gets the chunk closed after the text (`shape.CLOSING`), and what followed, with an empty text, is read as a
        chunk of its own (a finish, usage) unless it has nothing to act on."""
        data, part = piece
        event = self._event
        if part == 1:
            event = self._event = _Event(_UNREAD if self._passing() else _WHOLE, [], len(self._kept))
        elif event is None:  # the reader hands out an event's pieces in order, its beginning first
            raise AssertionError("a piece of an event that did not begin")
        start = 0
        if event.shape is _UNREAD:  # its beginning is not all read yet: where its text begins
            event.held.append(data)
            data = b"".join(event.held) if len(event.held) > 1 else data
            start = shape.opening(data)
            if start and part != 3:
                event.shape, event.held, part = (data[:start], shape.CLOSING), [], 1
            elif part == 3 or len(data) >= shape.LOOK:
                event.shape, event.held = _WHOLE, []
            else:
                return None
        if event.shape is _WHOLE:
            event.held.append(data)
            if part == 3:
                self._event = None
                return b"".join(event.held)[6:]
            return None
        if event.closed:
            event.held.append(data)
            out = b""
        else:
            end, event.slashes = shape.string_end(data, start, event.slashes)
            if end < 0:
                self._kept.append(data[start:] if start else data)
                out = data
            else:
                event.closed = True
                self._kept.append(data[start:end])
                event.held.append(data[end:])
                out = data[:end]
        if part == 3:
            self._event = None
            await self._ended(event, out)
        elif out:
            await self._sink(AnswerChunks(self.stage, [], usage=self.usage, raw=out, shape=event.shape, part=part))
        return None

    async def _ended(self, event: _Event, out: bytes) -> None:
        """The end of an event passed on in pieces: the chunk closed after its text, then what followed the text."""
        if not event.closed:
            raise bad_answer(self.stage, self.target, "sent an event that is not a chat.completion.chunk.")
        closing = AnswerChunks(self.stage, [], usage=self.usage, raw=out + shape.CLOSING, shape=event.shape, part=3)
        await self._sink(closing)
        rest = b"".join((event.shape[0][6:], *event.held))  # the chunk with an empty text
        chunk = self._decode(rest)
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None or choice.index:
            del self._kept[event.kept :]  # not the first choice's text: not the answer's
        alone = chunk.usage is None and len(chunk.choices) == 1 and choice is not None and choice.finish_reason is None
        if alone and choice is not None and not _besides_text(choice.delta):
            return  # nothing else in it
        await self.feed([rest])

    def _passing(self) -> bool:
        """Whether chunks may pass undecoded now: answer content flows (or this is the run's first call, whose role
        chunk goes at once) and no finish chunk is held."""
        return self._finish is None and (self.first or self._answering)

    def _fold(self) -> None:
        """Add the text of the reads passed on undecoded to the answer's: one decode for all of it."""
        if not self._kept:
            return
        kept, self._kept = self._kept, []
        try:
            self._parts.append(shape.text(kept))
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise bad_answer(self.stage, self.target, "sent an event that is not a chat.completion.chunk.") from None

    async def close(self) -> None:
        """The upstream said `[DONE]`: send what was held (an answer with no content) and the finish chunk."""
        held, self._held = self._held, []
        await self._sink(AnswerChunks(self.stage, held, self._finish, self.usage))

    def _take(self, payload: bytes, out: list[bytes]) -> None:
        self._fold()  # the kept reads' text first, to keep the order
        chunk = self._decode(payload)
        if self._shape is None and self._tries < LEARN_TRIES:
            self._learn(payload, chunk)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return  # a usage chunk: the client's comes at the end, with the total
        choice = chunk.choices[0]
        delta = choice.delta
        first = choice.index == 0  # the record keeps the first choice (`n` > 1 relays them all)
        if first and delta is not None:
            if delta.content:
                self._parts.append(delta.content)
            if delta.tool_calls:
                self._add_calls(tool_calls(delta))
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                self._reasoning.append(thought)
        if choice.finish_reason is not None:
            if first:
                self.finish_reason = choice.finish_reason
            if self._finish is not None:  # several choices (`n`): each has its finish chunk; the last goes last
                out.append(self._finish)
            self._finish = payload
            return
        answers = delta is not None and bool(delta.content or delta.tool_calls or delta.refusal)
        if not answers and (chunk.usage is not None or self._finish is not None):
            return  # usage on an empty delta, or anything empty after the finish chunk: nothing to relay
        if not answers and not self.first and not self._answering:
            self._held.append(payload)
            return
        if answers:
            self._answering = True
        if self._held:
            out.extend(self._held)
            self._held.clear()
        out.append(payload)

    def _learn(self, payload: bytes, chunk: Chunk) -> None:
        """The shape of the upstream's token chunks, from a chunk of text alone (`protocols.openai.shape`)."""
        if chunk.usage is not None or chunk.error is not None or len(chunk.choices) != 1:
            return
        choice = chunk.choices[0]
        delta = choice.delta
        if choice.index or choice.finish_reason is not None or delta is None or not delta.content:
            return
        if _besides_text(delta):
            return
        self._tries += 1
        self._shape = shape.learn(payload, delta.content)

    def _add_calls(self, deltas: list[ToolCallDelta]) -> None:
        for delta in deltas:
            call = self._calls.get(delta.index)
            if call is None:
                call = self._calls[delta.index] = {
                    "id": "",
                    "type": "function",
                    "function": {"name": "", "arguments": ""},
                }
            if delta.id:
                call["id"] = delta.id
            if delta.function is not None:
                function = call["function"]
                function["name"] += delta.function.name or ""
                function["arguments"] += delta.function.arguments or ""

    def _decode(self, payload: bytes) -> Chunk:
        try:
            chunk = chunk_decoder.decode(payload)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
            raise bad_answer(self.stage, self.target, "sent an event that is not a chat.completion.chunk.") from None
        if chunk.error is not None:
            said = self._secrets.redact(chunk.error.message or "no message", self.target.client_token)
            raise bad_answer(self.stage, self.target, f"sent an error event: {said}")
        return chunk


def abandoned(relay: Relay | None, messages: Any) -> Usage:
    """What a streamed final call spent when its client went away: the usage its upstream reported so far, else an
    estimate of its prompt and of the text it streamed."""
    if relay is not None and relay.usage is not None:
        return relay.usage
    return estimated(messages, "" if relay is None else relay.content + relay.reasoning)
