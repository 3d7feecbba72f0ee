"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Reading an upstream's server-sent events: its lines (CRLF, LF or CR), and the `data:` payloads up to
`[DONE]` (docs/guides/streaming.md)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import NamedTuple, overload

from ..errors import StreamIncomplete
from .sizes import ResponseTooLarge

DONE = b"[DONE]"

_LINE_END = re.compile(rb"\r\n?|\n")


@overload
def iter_batches(chunks: AsyncIterator[bytes], limit: int | None = None) -> AsyncIterator[list[bytes]]: ...
@overload
def iter_batches(
    chunks: AsyncIterator[bytes], limit: int | None = None, *, whole: bool
) -> AsyncIterator[list[bytes] | bytes | Piece]: ...
async def iter_batches(
    chunks: AsyncIterator[bytes], limit: int | None = None, *, whole: bool = False
) -> AsyncIterator[list[bytes] | bytes | Piece]:
    """The `data` payloads of an SSE byte stream, up to `[DONE]` (not included), as one list per read; with `whole`,
    a read that is whole events and nothing else, each one `data: {…}` line (`whole_events`), as it came, undecoded:
    a relay passes it on with its ids spliced, and reads its payloads only if it must; and an event whose line has
    not ended in its read, in pieces as they come (`Piece`), so that a big one is passed on as it arrives.

    Payloads that arrived together are handed out together, so a relay can write them out together
    (one write per upstream read, not one per event). Raises `StreamIncomplete` when the stream ends
    before `[DONE]`: a stream cut short must never look like a finished answer. With a `limit`, raises
    `ResponseTooLarge` as soon as the stream has passed that many bytes in all (counted here, like
    `limits.read_body` does, to spare a generator per read).

    Lines end at CRLF, LF or a lone CR (the SSE standard). Each byte is searched at most twice: the bytes of an
    unfinished line are not searched again when the next read arrives, so one long event arriving in many
    reads costs time in proportion to its length. Reads with no line end are kept aside and added to the buffer
    together when a line end comes, and a `data:` value is copied out of the buffer once: a buffer grown a read at
    a time was copied again at every growth (about nine times its size in all), and a value three times more, so
    at 16 MiB, out of the CPU's caches, each MiB took four times what it took at 1 MiB (`benchmarks/sizes.py`).
    A CR at the very end of a read waits for the next one, which may begin with the LF of the same CRLF (at the
    end of the stream, it ends its line). Until a CR is seen, line ends are found with `find`, and a read that is
    one whole `data:` event and nothing else (a model streaming token by token: most reads) is taken as it is,
    without the buffer.
    """
    buffer = bytearray()
    data: list[bytes] = []  # the `data:` lines of the event being read
    scan = 0  # the bytes of `buffer` before this hold no line end
    crs = False
    size = 0
    pending: list[bytes] = []  # reads with no line end in them, not yet in `buffer`
    piece = False  # `whole`: an event's line is being handed out in pieces
    async for chunk in chunks:
        if limit is not None:
            size += len(chunk)
            if size > limit:
                raise ResponseTooLarge(limit)
        if piece:
            end = _line_end(chunk)
            if end < 0:
                yield Piece(chunk, 2)
                continue
            yield Piece(chunk[:end], 3)
            piece = False
            chunk = chunk[end:]  # its line end (a blank line to the lines below: the event is over) and what follows
        elif whole and not (crs or buffer or pending or data):
            if whole_events(chunk):
                yield chunk
                continue
            if chunk.startswith(b"data: {") and _line_end(chunk) < 0:
                piece = True
                yield Piece(chunk, 1)
                continue
        if (
            not (crs or buffer or pending or data)
            and chunk.endswith(b"\n\n")
            and chunk.startswith(b"data:")
            and chunk.find(b"\n") == len(chunk) - 2
            and b"\r" not in chunk
        ):  # one whole event in one read, as a model's tokens arrive: what the lines below would make of it
            payload = chunk[6:-2] if chunk.startswith(b" ", 5) else chunk[5:-2]
            if payload.strip() == DONE:
                return
            yield [payload]
            continue
        crs = crs or b"\r" in chunk
        if not crs and b"\n" not in chunk:  # no line ends here: kept aside, added to the buffer in one piece
            pending.append(chunk)
            continue
        if pending and not buffer:  # what waited and this read, copied once into a new buffer
            buffer = bytearray().join((*pending, chunk))
            pending.clear()
        else:
            if pending:
                buffer += b"".join(pending)
                pending.clear()
            buffer += chunk
        batch: list[bytes] = []
        start = 0
        while True:
            if not crs:
                end = buffer.find(b"\n", scan)
                if end < 0:
                    scan = len(buffer)
                    break
                after = end + 1
            else:
                match = _LINE_END.search(buffer, scan)
                if match is None:
                    scan = len(buffer)
                    break
                end, after = match.span()
                if after == len(buffer) and after - end == 1 and buffer[end] == 0x0D:
                    scan = end  # maybe the first half of a CRLF
                    break
            begin = start
            start = scan = after
            if end > begin:
                if buffer.startswith(b"data:", begin):  # its value copied once, out of the buffer
                    skip = begin + 6 if buffer.startswith(b" ", begin + 5) else begin + 5
                    with memoryview(buffer) as view:
                        data.append(bytes(view[skip:end]))
                # Comments (`: keep-alive`), `event:`, `id:` and `retry:` lines carry nothing we relay.
                continue
            if not data:
                continue
            payload = b"\n".join(data)
            data.clear()
            if payload.strip() == DONE:
                if batch:
                    yield batch
                return
            batch.append(payload)
        del buffer[:start]
        scan -= start
        if batch:
            yield batch
        if whole and not data and buffer.startswith(b"data: {") and b"\r" not in buffer:
            piece = True  # an event begun after others in this read: its line so far is its first piece
            yield Piece(bytes(buffer), 1)
            buffer.clear()
            scan = 0
    buffer += b"".join(pending)
    if buffer.endswith(b"\r") and buffer.startswith(b"data:"):  # a last line ended by a lone CR at the very end
        value = bytes(buffer[5:-1])
        data.append(value[1:] if value.startswith(b" ") else value)
    if data and b"\n".join(data).strip() == DONE:  # `[DONE]` without its blank line
        return
    raise StreamIncomplete


def _line_end(chunk: bytes) -> int:
    """Where the first line end (LF or CR) in `chunk` is, or -1: two `find`s, each the C library's byte search (a
    regular expression without a literal to look for steps through the bytes one by one: 5 ms per MiB)."""
    lf, cr = chunk.find(b"\n"), chunk.find(b"\r")
    return lf if cr < 0 else cr if lf < 0 else min(lf, cr)


class Piece(NamedTuple):
    """`iter_batches(whole=True)`: part of an event's one `data: {…` line, which has not ended in the read that began
    it. `part` 1 is its beginning (`data: ` and on), 2 a piece of its middle, 3 its end (without the line end). The
    event ends where its line does: a second `data:` line after it would begin an event of its own."""

    data: bytes
    part: int


def whole_events(chunk: bytes) -> bool:
    """Whether `chunk` is whole SSE events and nothing else, each a single `data: {` line and the blank line after
    it (no CR anywhere): what a model's server sends for its tokens. A few scans of the bytes, no loop: since each
    event ends at a `\\n\\n`, `chunk` holds twice as many LFs as events, and every event but the first begins right
    after one (JSON text holds no raw LF)."""
    if not (chunk.startswith(b"data: {") and chunk.endswith(b"\n\n")):
        return False
    if chunk.find(b"\n") == len(chunk) - 2:  # one event, as a model's tokens arrive: one scan, cut short
        return b"\r" not in chunk
    events = chunk.count(b"\n\n")
    return chunk.count(b"\n") == 2 * events and chunk.count(b"\n\ndata: {") == events - 1 and b"\r" not in chunk
