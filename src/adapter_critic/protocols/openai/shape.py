"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The shape of an upstream's token chunks, so that most of them are relayed without being decoded.

A server streams its tokens as chunks that are byte for byte the same but for the text: what comes before the
content string and what comes after it do not change from token to token (the ids, the model, `"finish_reason":
null`, …). A `Shape` is those two, as SSE bytes: the head (`data: ` up to and with the content's opening quote) and
the tail (from its closing quote to the blank line that ends the event). It is learnt from one chunk that was decoded
anyway (`learn`), and a read whose every event is head, a string body without a quote, and tail (`bodies`) is then a
run of token chunks of exactly that shape: nothing in it but their text differs from the chunk that was decoded.
The text is the bodies, which a JSON string's quotes make whole (`text`). Our own head and tail (another id, model,
created) are made once per stream from the upstream's (`rewritten`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

Shape = tuple[bytes, bytes]  # (head, tail), see the module

_any = msgspec.json.Decoder()
_text = msgspec.json.Decoder(str)
_encoder = msgspec.json.Encoder()


def learn(payload: bytes, text: str) -> Shape | None:
    """The shape of `payload`, a decoded chunk whose only choice's delta has the content `text` and nothing to act on
    (no finish, no usage: the caller checks); None when it cannot be told (the text escaped otherwise than msgspec
    would, or the chunk with its content emptied is not the chunk read from head and tail)."""
    quoted = _encoder.encode(text)
    at = payload.find(quoted)
    if at < 0:
        return None
    head, tail = payload[: at + 1], payload[at + len(quoted) - 1 :]
    try:
        fields: Any = _any.decode(payload)
        fields["choices"][0]["delta"]["content"] = ""
        if _any.decode(head + tail) != fields:
            return None
    except (msgspec.DecodeError, TypeError, KeyError, IndexError):
        return None
    return b"data: " + head, tail + b"\n\n"


def bodies(read: bytes, shape: Shape) -> list[bytes] | None:
    """The string bodies of `read`'s events when every one of them is head, body and tail of `shape` (a body with no
    quote: one string); else None. `read` is whole events, each on one line (`upstream.sse.whole_events`)."""
    head, tail = shape
    n = len(head)
    end = len(read) - len(tail)
    if read.find(b'"', n) == end and read.startswith(head) and read.endswith(tail):  # one event: no split
        return [read[n:end]]
    parts = read.split(tail)
    if parts.pop():  # the read ends with an event's tail
        return None
    for part in parts:
        if not part.startswith(head) or part.find(b'"', n) >= 0:
            return None
    return [part[n:] for part in parts]


def text(kept: list[bytes]) -> str:
    """The text of string bodies in a row; `msgspec.DecodeError` (or `UnicodeDecodeError`) when they are not JSON
    string text. Bodies without a backslash (no escape) are their text as UTF-8, decoded by Python's own codec,
    several times faster than a JSON decoder on a long text (which also refuses control characters in it: here they
    are taken as text)."""
    joined = b"".join(kept)
    if b"\\" not in joined:
        return joined.decode()
    return _text.decode(b"".join((b'"', joined, b'"')))


def rewritten(shape: Shape, rewrite: Callable[[bytes], bytes]) -> Shape | None:
    """`shape` with the chunk it frames rewritten by `rewrite` (a chunk's payload to another's, the content string
    untouched, since it is in `choices`, which `rewrite` leaves as it was); None when the content is not found there."""
    head, tail = shape
    skeleton = head[6:] + tail[:-2]  # the chunk with an empty content
    fields = msgspec.json.decode(skeleton, type=dict[str, msgspec.Raw])
    choices = bytes(fields.get("choices", b""))
    start = skeleton.find(choices) if choices else -1
    split = len(head) - 6  # where the empty content's closing quote is
    if start < 0 or not start < split < start + len(choices):
        return None
    ours = rewrite(skeleton)
    at = ours.find(choices)
    if at < 0:
        return None
    at += split - start
    return b"data: " + ours[:at], ours[at:] + b"\n\n"


# -- one big chunk, in pieces -----------------------------------------------------------------------------------
# The beginning of a chunk's first choice's content, its opening quote last: the choice's index (0) may come first and
# the role with the content. The nesting it opens is what `CLOSING` closes.
_OPENING = re.compile(
    rb'"choices": ?\[ ?\{ ?(?:"index": ?0, ?)?"delta": ?\{ ?(?:"role": ?"assistant", ?)?"content": ?"'
)
CLOSING = b'"}}]}\n\n'  # the content string, its delta, its choice, the choices and the chunk closed
LOOK = 4096  # how far into a chunk its content may begin


def opening(data: bytes) -> int:
    """Where the content string's text begins in `data`, the first piece of an event (`data: {` and on); 0 when it
    does not begin in the first `LOOK` bytes as a chunk's first choice's content, as `data` up to there with
    `CLOSING` decoded says."""
    found = _OPENING.search(data, 0, LOOK)
    if found is None:
        return 0
    try:
        fields: Any = _any.decode(data[6 : found.end()] + CLOSING[:-2])
        if fields["choices"][0]["delta"]["content"] != "":
            return 0
    except (msgspec.DecodeError, TypeError, KeyError, IndexError):
        return 0
    return found.end()


def string_end(data: bytes, at: int, slashes: int) -> tuple[int, int]:
    """The first quote from `at` on that ends a JSON string (one not escaped by a backslash before it), and -1 when
    none does; with the backslashes `data` ends with then (`slashes` before `data`, when `at` is 0, are counted too)."""
    carry = slashes if at == 0 else 0
    while True:
        quote = data.find(b'"', at)
        stop = len(data) if quote < 0 else quote
        i = stop
        while i > at and data[i - 1] == 0x5C:
            i -= 1
        run = stop - i + (carry if i == 0 else 0)
        if quote < 0:
            return -1, run
        if run % 2 == 0:
            return quote, 0
        at = quote + 1
