"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Decoding an upstream answer's `Content-Encoding` a bounded piece at a time.

The server asks upstreams for `gzip` or `identity` only (`ACCEPT_ENCODING`). A compressed answer is inflated
in pieces of at most `PIECE` bytes, however much one received chunk would inflate to, so the size limit
(`limits.read_body`, `sse.iter_batches`) counts every piece as it comes and a small body that inflates to gigabytes (a
"gzip bomb", also nested as `gzip, gzip`) stops at the limit with memory flat. `deflate` is decoded too;
any other coding (br, zstd, compress, ...) was not asked for and is refused (`UndecodableAnswer`), since
it cannot be inflated a bounded piece at a time here. An answer without `Content-Encoding` is passed on as
it comes, untouched.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator

import httpx

from ..errors import AdapterCriticError

ACCEPT_ENCODING = "gzip, identity"
PIECE = 64 * 1024

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UndecodableAnswer(AdapterCriticError):
    """An upstream answer in a content coding that was not asked for, or whose compressed data is corrupt."""


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The response's body, decoded a bounded piece at a time (see the module)."""
    if response.is_stream_consumed:  # read whole, and decoded, before it got here (httpx.MockTransport)
        return _whole(response.content)
    return decoded(response.headers.get("content-encoding"), response.aiter_raw())


def decoded(coding: str | None, raw: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`raw`, a body in the content coding `coding` (a `Content-Encoding` value), decoded a bounded piece at a
    time; raises `UndecodableAnswer` for a coding that was not asked for."""
    if not coding:
        return raw
    codings = [c.strip().lower() for c in coding.split(",") if c.strip().lower() not in ("", "identity")]
    if not codings:
        return raw
    for name in codings:
        if name not in _WBITS:
            raise UndecodableAnswer(f"the answer's content-encoding {name!r} was not asked for ({ACCEPT_ENCODING})")
    # The codings are listed in the order they were applied: undo the last one first.
    return _decoded(raw, [_Inflater(name) for name in reversed(codings)])


async def _whole(content: bytes) -> AsyncIterator[bytes]:
    yield content


async def _decoded(raw: AsyncIterator[bytes], inflaters: list[_Inflater]) -> AsyncIterator[bytes]:
    async for chunk in raw:
        for piece in _through(inflaters, chunk):
            yield piece
    for piece in _through(inflaters, None):
        yield piece


def _through(inflaters: list[_Inflater], data: bytes | None) -> Iterator[bytes]:
    """`data` through every inflater in turn, each piece passed on before the next is made (None: the end)."""
    first, rest = inflaters[0], inflaters[1:]
    pieces = first.feed(data) if data is not None else first.finish()
    for piece in pieces:
        yield from _through(rest, piece) if rest else (piece,)
    if data is None and rest:
        yield from _through(rest, None)


class _Inflater:
    """One content coding undone, at most `PIECE` bytes per piece; several gzip members in a row are read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._wbits = _WBITS[name]
        self._zlib = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if not self._started and data and self.name == "deflate" and not _looks_like_zlib(data):
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # servers send raw deflate as often as zlib's
        self._started = self._started or bool(data)
        while True:
            try:
                piece = self._zlib.decompress(data, PIECE)
            except zlib.error as exc:
                raise UndecodableAnswer(f"the answer's {self.name} data is corrupt ({exc})") from None
            if piece:
                yield piece
            data = self._zlib.unconsumed_tail
            if self._zlib.eof and self._zlib.unused_data and self.name != "deflate":
                data = self._zlib.unused_data + data  # the next gzip member
                self._zlib = zlib.decompressobj(self._wbits)
            elif not data and len(piece) < PIECE:
                return

    def finish(self) -> Iterator[bytes]:
        return self.feed(b"")


def _looks_like_zlib(data: bytes) -> bool:
    return len(data) >= 2 and (data[0] & 0x0F) == 8 and (data[0] << 8 | data[1]) % 31 == 0
