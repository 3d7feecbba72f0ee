"""Streaming answers (`"stream": true`, SPEC §8): a pure ASGI response that runs the workflow and sends SSE.

Two tasks share one request:
- the producer (the response's own task) runs the stages and writes each SSE event as it is ready;
- the watcher waits for the client's `http.disconnect` and then cancels everything, in-flight
  upstream calls included; while it waits it writes a `: keep-alive` comment whenever nothing has
  been sent for `keepalive_seconds`.

Status and headers go out with the first thing written. Until then a failure is an ordinary §7 error
response; after it, a failure ends the stream with one `data: {"error": ...}` event and no `[DONE]`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from anyio import CancelScope
from starlette.types import Receive, Scope, Send

from ._exceptions import APIError, ServerError, UpstreamError, UpstreamUnavailable
from ._response import extension
from ._sse import DONE_EVENT, KEEPALIVE, event, raw_event
from ._upstream import Upstream, Usage, relay_first_call_error
from ._workflows import FinalCall, Run

logger = logging.getLogger("adapter_critic")

Emit = Callable[[bytes], Awaitable[None]]

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
# Text synthesised into chunks (adapter answers, degraded drafts) is cut into pieces of this many characters.
_PIECE = 512


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[msgspec.Raw] | None = None
    refusal: str | None = None


class _ChunkChoice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _ChunkError(msgspec.Struct):
    message: str | None = None


class _Chunk(msgspec.Struct):
    """The fields of an upstream `chat.completion.chunk` the relay reads; the rest passes through untouched."""

    choices: list[_ChunkChoice] = []
    usage: Usage | None = None
    error: _ChunkError | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encoder = msgspec.json.Encoder()


class StreamResponse:
    """Runs one request's workflow and streams its answer; an ASGI app for exactly one request."""

    def __init__(
        self,
        run: Run,
        upstream: Upstream,
        *,
        served_model: str,
        completion_id: str,
        started: float,
        keepalive_seconds: float,
        include_usage: bool,
    ) -> None:
        self.run = run
        self.upstream = upstream
        self.completion_id = completion_id
        self.started = started
        self.keepalive_seconds = keepalive_seconds
        self.include_usage = include_usage
        self.content_sent = False
        self.created = int(time.time())
        self.served_model = served_model
        # Every chunk gets the same id, created and served model, and says what it is (relayed chunks are rewritten).
        self._ids = {
            "id": msgspec.Raw(_encoder.encode(completion_id)),
            "object": msgspec.Raw(b'"chat.completion.chunk"'),
            "created": msgspec.Raw(_encoder.encode(self.created)),
            "model": msgspec.Raw(_encoder.encode(served_model)),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = send
        self._last_write = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch, receive, tg.cancel_scope)
            try:
                await self._stream(self._write)
            except APIError as exc:
                await self._end(exc)
            except Exception:
                logger.exception("streaming request %s failed unexpectedly", self.completion_id)
                await self._end(ServerError(f"Internal server error (request id {self.completion_id}); see the log."))
            else:
                await self._end(None)
            tg.cancel_scope.cancel()  # the answer is out: stop the keep-alives and the disconnect watch

    # -- writing ---------------------------------------------------------------------------------
    # The producer (this request's own task) writes each event straight to the client; the
    # watcher writes a comment whenever nothing went out for `keepalive_seconds`. At most one of them
    # is inside `send` at a time: the keep-alive only writes while no event is being written, and an
    # event waits for a keep-alive write in progress (`_ticking`).
    _started = False
    _done = False
    _writing = False
    _ticking: anyio.Event | None = None

    async def _write(self, data: bytes) -> None:
        if self._ticking is not None:
            await self._ticking.wait()
        self._writing = True
        try:
            await self._write_unlocked(data)
        finally:
            self._writing = False

    async def _watch(self, receive: Receive, scope: CancelScope) -> None:
        """Cancel everything when the client disconnects; between its messages, send the keep-alives.

        One task does both (a task per request costs more than the wait): `receive` is cancellation-safe,
        so waiting for it with a deadline loses nothing.
        """
        while True:
            wait = self._last_write + self.keepalive_seconds - time.monotonic()
            if wait > 0:
                with anyio.move_on_after(wait):
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        logger.info("client disconnected: cancelling the request's upstream calls")
                        scope.cancel()
                        return
                continue
            if self._done:
                return
            if self._writing:  # an event is going out (the client reads slowly): it resets the clock
                self._last_write = time.monotonic()
                continue
            self._ticking = anyio.Event()
            try:
                await self._write_unlocked(KEEPALIVE)
            finally:
                self._ticking.set()
                self._ticking = None

    async def _write_unlocked(self, data: bytes) -> None:
        """Write `data`, starting the response first if nothing was sent yet."""
        if not self._started:
            self._started = True
            await self._send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await self._send({"type": "http.response.body", "body": data, "more_body": True})
        self._last_write = time.monotonic()

    async def _end(self, error: APIError | None) -> None:
        """Close the response: normally, or with the error as a §7 response (nothing sent yet) or event."""
        if self._ticking is not None:
            await self._ticking.wait()
        self._done = True
        if error is None:
            if not self._started:  # cannot happen (the tail always writes), but never hang the client
                error = ServerError("The stream ended before any answer was produced.")
            else:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                return
        if not self._started:
            self._started = True
            headers = [(b"content-type", b"application/json")]
            headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
            await self._send({"type": "http.response.start", "status": error.status_code, "headers": headers})
            await self._send({"type": "http.response.body", "body": error.body(), "more_body": False})
            return
        # After the first byte the status is gone: end with the error event and no [DONE] (§8).
        await self._send({"type": "http.response.body", "body": raw_event(error.body()), "more_body": False})

    async def _stream(self, emit: Emit) -> None:
        run = self.run
        final = await run.prepare()
        if final is None:
            await self._emit_outcome(emit)
            return
        try:
            # Retried and fallen back like any stage call, but only until a byte of it has been relayed.
            await run.stream_final(final, self._relay, emit)
        except UpstreamError as exc:
            if final.first:
                raise relay_first_call_error(exc) from None
            if self.content_sent or run.plan.on_review_error == "fail":
                raise
            run.degrade(final.stage, exc)  # no answer content went out yet: the draft can still stand
            await self._emit_outcome(emit)

    async def _relay(self, final: FinalCall, emit: Emit) -> None:
        """Stream the final call live: rewrite each chunk's id/created/model and pass the rest through."""
        outcome = self.run.outcome
        usage = outcome.usage.setdefault(final.stage, Usage())
        parts: list[str] = []
        # Chunks with no answer content (the role chunk) are held back until content follows, so a later
        # stage that fails before any answer went out can still be degraded to the draft (§8).
        held: list[bytes] = []
        finish_reason: str | None = None
        finish_fields: dict[str, Any] | None = None
        began = time.perf_counter()
        try:
            async with self.upstream.stream(final.stage, final.target, final.body) as batches:
                async for batch in batches:
                    # Events that arrived in one upstream read go out in one write.
                    out: list[bytes] = []
                    try:
                        for payload in batch:
                            chunk = self._decode_chunk(final, payload)
                            usage.add(chunk.usage)
                            if not chunk.choices:
                                continue  # the upstream's usage chunk: ours, with the total, comes at the end
                            choice = chunk.choices[0]
                            delta = choice.delta
                            if delta is not None and delta.content:
                                parts.append(delta.content)
                            if choice.finish_reason is not None:
                                # Held back so the extension (and the final usage) can ride on it at the end.
                                finish_reason = choice.finish_reason
                                finish_fields = _fields_decoder.decode(payload)
                                continue
                            fields = _fields_decoder.decode(payload)
                            fields.update(self._ids)
                            encoded = raw_event(_encoder.encode(fields))
                            answers = delta is not None and bool(delta.content or delta.tool_calls or delta.refusal)
                            if not answers and not final.first and not self.content_sent:
                                held.append(encoded)
                                continue
                            if answers:
                                self.content_sent = True
                            out.extend(held)
                            held.clear()
                            out.append(encoded)
                    except UpstreamError:
                        if out:  # what arrived before the failure still goes out, ahead of the error event
                            await emit(b"".join(out))
                        raise
                    if out:
                        await emit(b"".join(out))
        finally:
            outcome.spent(final.stage, began)
        self.run.finish("".join(parts), None, finish_reason or "stop")
        if held:  # an answer with no content at all
            await emit(b"".join(held))
        await self._emit_tail(emit, finish_fields)

    def _decode_chunk(self, final: FinalCall, payload: bytes) -> _Chunk:
        try:
            chunk = _chunk_decoder.decode(payload)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
            raise UpstreamUnavailable(
                f"The {final.stage} stage's upstream ({final.target.label}) sent an event that is not "
                "a chat.completion.chunk.",
                stage=final.stage,
            ) from None
        if chunk.error is not None:
            detail = self.upstream.secrets.redact(chunk.error.message or "no message", final.target.client_token)
            raise UpstreamUnavailable(
                f"The {final.stage} stage's upstream ({final.target.label}) sent an error event: {detail}",
                stage=final.stage,
            )
        return chunk

    async def _emit_outcome(self, emit: Emit) -> None:
        """Send an answer that is already known (adapter result, or the draft) as chunks."""
        outcome = self.run.outcome
        await emit(event(self._chunk({"role": "assistant", "content": ""})))
        text = outcome.content or ""
        for start in range(0, len(text), _PIECE):
            self.content_sent = True
            await emit(event(self._chunk({"content": text[start : start + _PIECE]})))
        if outcome.tool_calls:
            calls = [
                {"index": i, **call} if isinstance(call, dict) else call for i, call in enumerate(outcome.tool_calls)
            ]
            self.content_sent = True
            await emit(event(self._chunk({"tool_calls": calls})))
        await self._emit_tail(emit, None)

    async def _emit_tail(self, emit: Emit, finish_fields: dict[str, Any] | None) -> None:
        """The finish chunk with the extension, the usage chunk when asked for, then [DONE]."""
        outcome = self.run.outcome
        ext = extension(outcome, _ms_since(self.started))
        if finish_fields is None:
            finish_fields = self._chunk({}, finish_reason=outcome.finish_reason or "stop")
        else:
            finish_fields.update(self._ids)
        finish_fields["adapter_critic"] = ext
        tail = [event(finish_fields)]
        if self.include_usage:
            usage_chunk = self._chunk(None)
            usage_chunk["usage"] = ext.tokens.total
            usage_chunk["adapter_critic"] = ext
            tail.append(event(usage_chunk))
        tail.append(DONE_EVENT)
        await emit(b"".join(tail))

    def _chunk(self, delta: dict[str, Any] | None, finish_reason: str | None = None) -> dict[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.served_model,
            "choices": choices,
        }


def _ms_since(began: float) -> float:
    return (time.perf_counter() - began) * 1000
