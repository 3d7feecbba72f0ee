"""Reading an upstream's server-sent events: the `data:` payloads up to `[DONE]` (SPEC §8)."""

from __future__ import annotations

from collections.abc import AsyncIterator

DONE = b"[DONE]"


class StreamIncomplete(Exception):
    """The upstream's event stream ended without `data: [DONE]`."""


async def iter_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """The `data` payloads of an SSE byte stream, up to `[DONE]` (not included), as one list per read.

    Payloads that arrived together are handed out together, so a relay can write them out together
    (one write per upstream read, not one per event). Raises `StreamIncomplete` when the stream ends
    before `[DONE]`: a stream cut short must never look like a finished answer.
    """
    buffer = bytearray()
    data: list[bytes] = []
    async for chunk in chunks:
        buffer += chunk
        batch: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if line:
                if line.startswith(b"data:"):
                    value = line[5:]
                    data.append(value[1:] if value.startswith(b" ") else value)
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
        if batch:
            yield batch
    if data and b"\n".join(data).strip() == DONE:
        return
    raise StreamIncomplete
