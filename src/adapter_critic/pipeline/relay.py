"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Relay`: reading one streamed final call's upstream chunks and deciding what of them the client gets.

- Chunks go on as they arrive, those of one upstream read together (`AnswerChunks`).
- The chunk with `finish_reason` is kept back: the client gets it last, with the run's tail.
- Usage is the upstream's to report, the client's to get once: a chunk that only carries usage (with
  `choices: []`, or LiteLLM's `[{"index": 0, "delta": {}}]`) is counted and not relayed; an upstream that
  repeats its running usage on every chunk is counted once (the last report wins).
- Unless this is the run's first call, chunks with no answer content (the role chunk) wait until content
  follows, so a call that fails before any answer went out can still degrade to the draft.

Most chunks are not decoded as they pass. A read of whole events (`upstream.sse.iter_batches(whole=True)`) whose
every event begins with the bytes the upstream's first chunk began with (`data: ` and its id, object, created and
model fields: `leading`) and says nothing the relay must act on — no usage but a `null` one, no `finish_reason` but
`null`, no `"error"` key — once answer content is flowing, goes on as it came (`AnswerChunks.raw`) and is kept; the
kept reads are decoded together, in one call, when the answer's text is asked for (`answer`, `content`, or before a
chunk that is decoded, to keep the order). Anything else is decoded chunk by chunk, as the list above says. So a
chunk that is not JSON may reach the client before the stream ends with the error that says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ..core import Answer, StageTarget, Usage
from ..events import AnswerChunks
from ..protocols.openai.chunks import Chunk, Delta, ToolCallDelta, chunk_decoder, tool_calls, upstream_leading
from ..redact import Secrets
from ..upstream.failures import bad_answer
from .stages import estimated

_chunks_decoder = msgspec.json.Decoder(list[Chunk])


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
        self._leading: bytes | None = None  # `data: ` and the fields the upstream's first chunk began with
        self._next = b""  # the same after the blank line that ends an event
        self._kept: list[bytes] = []  # reads passed on undecoded, not yet read for the answer (`_fold`)

    @property
    def content(self) -> str:
        self._fold()
        return "".join(self._parts)

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

    async def feed(self, batch: list[bytes] | bytes) -> None:
        """One upstream read: its payloads, or the read itself when it is whole events (`iter_batches`)."""
        if isinstance(batch, bytes):
            leading = self._leading
            if leading is not None and self._passes(batch, leading):
                self._kept.append(batch)
                await self._sink(AnswerChunks(self.stage, [], usage=self.usage, raw=batch, leading=leading))
                return
            batch = [line[6:] for line in batch.split(b"\n\n")[:-1]]
        out: list[bytes] = []
        try:
            for payload in batch:
                self._take(payload, out)
        finally:  # what arrived before a broken chunk still goes out, ahead of the error
            if out:
                await self._sink(AnswerChunks(self.stage, out, usage=self.usage))

    def _passes(self, read: bytes, leading: bytes) -> bool:
        """Whether a read of whole events goes on undecoded (see the module): a few scans of its bytes."""
        if self._finish is not None or not (self.first or self._answering):
            return False
        if not read.startswith(leading) or read.count(self._next) != read.count(b"\n\n") - 1:
            return False
        usage = read.count(b'"usage"')
        if usage and usage != read.count(b'"usage":null}\n\n') + read.count(b'"usage": null}\n\n'):
            return False
        finish = read.count(b'"finish_reason"')
        if finish and finish != read.count(b'"finish_reason":null') + read.count(b'"finish_reason": null'):
            return False
        return b'"error"' not in read

    def _fold(self) -> None:
        """Read the kept reads for the answer: their chunks decoded in one call, as one JSON array."""
        if not self._kept:
            return
        kept, self._kept = self._kept, []
        array = b"".join((b"[", b",".join([read[6:-2] for read in kept]).replace(b"\n\ndata: ", b","), b"]"))
        try:
            chunks = _chunks_decoder.decode(array)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise bad_answer(self.stage, self.target, "sent an event that is not a chat.completion.chunk.") from None
        for chunk in chunks:
            if chunk.choices:
                choice = chunk.choices[0]
                if choice.index == 0 and choice.delta is not None:
                    self._add_delta(choice.delta)

    async def close(self) -> None:
        """The upstream said `[DONE]`: send what was held (an answer with no content) and the finish chunk."""
        held, self._held = self._held, []
        await self._sink(AnswerChunks(self.stage, held, self._finish, self.usage))

    def _take(self, payload: bytes, out: list[bytes]) -> None:
        self._fold()  # the kept reads' text first, to keep the order
        if self._leading is None:
            self._leading = b"data: " + (upstream_leading(payload) or b"\x00")  # no such beginning: none passes
            self._next = b"\n\n" + self._leading
        chunk = self._decode(payload)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return  # a usage chunk: the client's comes at the end, with the total
        choice = chunk.choices[0]
        delta = choice.delta
        first = choice.index == 0  # the record keeps the first choice (`n` > 1 relays them all)
        if first and delta is not None:
            self._add_delta(delta)
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

    def _add_delta(self, delta: Delta) -> None:
        if delta.content:
            self._parts.append(delta.content)
        if delta.tool_calls:
            self._add_calls(tool_calls(delta))
        thought = delta.reasoning_content or delta.reasoning
        if thought:
            self._reasoning.append(thought)

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
