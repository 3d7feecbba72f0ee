"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The SSE writer (docs/guides/streaming.md): a pure ASGI response that runs a streamed run and writes its events.

Two tasks share one request:
- the producer (the response's own task) runs the run; each answer chunk it relays is written as it comes,
  and the tail (finish, usage, `[DONE]`) when the run is done;
- the watcher (on asyncio, started once the answer has taken `disconnect.WATCH_AFTER_SECONDS`) waits for the
  client's `http.disconnect` and then cancels everything, in-flight upstream calls included; while it waits it
  writes a `: keep-alive` comment whenever nothing has been sent for `keepalive_seconds`. A write that finds the
  connection closed does the same (`disconnect`): a client that went away leaves one log line, not a traceback.

Status and headers go out with the first thing written. Until then a failure is an ordinary error
response; after it, a failure ends the stream with one `data: {"error": ...}` event and no `[DONE]`.
The writer knows nothing of workflows or protocols: it gets a `RunStreamer`, the client's protocol's
`StreamRenderer` and its error renderer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import anyio
from starlette.types import Receive, Scope, Send

from ..core import Usage
from ..errors import APIError, Rendered, internal_error, render_error
from ..events import AnswerChunks, RunRecord, StageFinished, payloads_of
from ..protocols.base import Redact, StreamRenderer
from ..service.outcomes import RunStreamer
from .disconnect import ClientGone, guard_send, log_client_gone, watched

logger = logging.getLogger("adapter_critic")


_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class StreamResponse:
    """Streams one request's run; an ASGI app for exactly one request."""

    def __init__(
        self,
        run: RunStreamer,
        chunks: StreamRenderer,
        *,
        request_id: str,
        keepalive_seconds: float,
        redact: Redact | None = None,
        progress: bool = False,
        errors: Callable[[APIError, Redact | None], Rendered] = render_error,
        headers: list[tuple[bytes, bytes]] | None = None,
        record: RunRecord | None = None,
    ) -> None:
        self.run = run
        self.chunks = chunks
        # The run's record as it goes, and the renderer's optional `begin` (`protocols.base.StreamRenderer`).
        self.record = record
        self._begin: Callable[[Usage], None] | None = getattr(chunks, "begin", None) if record is not None else None
        # The renderer's optional `spliced`: a read of whole upstream events passed on as it came (`AnswerChunks.raw`).
        self._splice: Callable[[AnswerChunks], bytes] | None = getattr(chunks, "spliced", None)
        self.request_id = request_id
        self.keepalive_seconds = keepalive_seconds
        self.redact = redact
        self._finish: bytes | None = None
        self._relayed = False
        self.progress = progress
        self.errors = errors
        self.headers = [*_HEADERS, *(headers or [])]
        self._pieces: list[bytes] = []  # a chunk passed on in pieces, so far (`_relay`)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = guard_send(send)
        self._last_write = time.monotonic()
        # On asyncio the watcher starts once the answer has taken `WATCH_AFTER_SECONDS` (`disconnect.watched`): most
        # streams are done sooner, and a write to a closed connection says the client went away anyway.
        await watched(self._answer_or_gone, functools.partial(self._watch, receive))

    async def _answer_or_gone(self) -> None:
        try:
            await self._answer()
        except ClientGone:
            self._client_gone(None)  # a write found the connection closed: this task is unwinding already

    async def _answer(self) -> None:
        """Run the request and stream its answer, then end the response: normally, or with the error (`_end`)."""
        try:
            record = await self.run(self._relay, self._progress if self.progress else None)
            self._beginning(None)
            if self._relayed:
                await self._write(self.chunks.tail(record, self._finish))
            else:  # the answer was known whole (an adapter's, a degraded draft)
                await self._write(self.chunks.answer(record.answer) + self.chunks.tail(record, None))
            self._complete = True  # `[DONE]` is out: a client that now closes its connection has its whole answer
        except ClientGone:
            raise
        except APIError as exc:
            await self._end(exc)
        except Exception:
            logger.exception("streaming request %s failed unexpectedly", self.request_id)
            await self._end(internal_error(self.request_id))
        else:
            await self._end(None)

    def _client_gone(self, cancel: Callable[[], object] | None) -> None:
        """The client went away (it disconnected, or a write found its connection closed); `cancel` cancels the
        answer (given by the watcher, while the answer goes on)."""
        if not self._gone and not self._complete:
            log_client_gone(self.request_id)
        self._gone = True
        if cancel is not None:
            cancel()

    async def _progress(self, finished: StageFinished) -> None:
        await self._write(self.chunks.progress(finished.stage, finished.error is None, round(finished.elapsed_ms, 1)))

    async def _relay(self, chunks: AnswerChunks) -> None:
        self._relayed = True
        raw = chunks.raw
        if raw is not None and self._splice is not None:  # a chat-completions client: the read as it came
            await self._write(self._splice(chunks))
            return
        if chunks.finish is not None:
            self._finish = chunks.finish
        if raw is not None and chunks.part:  # another renderer gets a chunk passed on in pieces whole, at its end
            self._pieces.append(raw)
            if chunks.part != 3:
                return
            raw, self._pieces = b"".join(self._pieces), []
        payloads = chunks.payloads if raw is None else payloads_of(raw)
        if payloads:
            if self._begin is not None:  # checked here: this runs for every read of the answer
                self._beginning(chunks.usage)
            await self._write(self.chunks.relayed(payloads))

    def _beginning(self, reported: Usage | None) -> None:
        """Before the answer's first event: tell the renderer the usage known so far — every stage finished, and
        what the final call's upstream has `reported` — once."""
        if self._begin is None or self.record is None:
            return
        known = self.record.total_usage()
        known.add(reported)
        self._begin(known)
        self._begin = None

    # -- writing ---------------------------------------------------------------------------------
    # The producer (this request's own task) writes each event straight to the client; the
    # watcher writes a comment whenever nothing went out for `keepalive_seconds`. At most one of them
    # is inside `send` at a time: the keep-alive only writes while no event is being written, and an
    # event waits for a keep-alive write in progress (`_ticking`).
    _started = False
    _done = False
    _writing = False
    _ticking: anyio.Event | None = None
    _gone = False
    _complete = False

    async def _write(self, data: bytes) -> None:
        if self._ticking is not None:
            await self._ticking.wait()
        self._writing = True
        try:
            if not self._started:
                await self._write_unlocked(data)
                return
            # `_write_unlocked` once the response started, inline: this runs for every chunk.
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
            self._last_write = time.monotonic()
        finally:
            self._writing = False

    async def _watch(self, receive: Receive, cancel: Callable[[], object]) -> None:
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
                        self._client_gone(cancel)
                        return
                continue
            if self._done:
                return
            if self._writing:  # an event is going out (the client reads slowly): it resets the clock
                self._last_write = time.monotonic()
                continue
            self._ticking = anyio.Event()
            try:
                await self._write_unlocked(self.chunks.keepalive)
            except ClientGone:
                self._client_gone(cancel)
                return
            finally:
                self._ticking.set()
                self._ticking = None

    async def _write_unlocked(self, data: bytes) -> None:
        """Write `data`, starting the response first if nothing was sent yet."""
        if not self._started:
            self._started = True
            await self._send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": True})
        self._last_write = time.monotonic()

    async def _end(self, error: APIError | None) -> None:
        """Close the response: normally, or with the error as an error response (nothing sent yet) or
        event."""
        if self._ticking is not None:
            await self._ticking.wait()
        self._done = True
        if error is None:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        rendered = self.errors(error, self.redact)
        if not self._started:
            self._started = True
            headers = [(b"content-type", b"application/json"), *self.headers[len(_HEADERS) :]]
            headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in rendered.headers.items()]
            await self._send({"type": "http.response.start", "status": rendered.status, "headers": headers})
            await self._send({"type": "http.response.body", "body": rendered.body, "more_body": False})
            return
        # After the first byte the status is gone: end with the error event and no [DONE].
        await self._send({"type": "http.response.body", "body": self.chunks.error_event(rendered), "more_body": False})
