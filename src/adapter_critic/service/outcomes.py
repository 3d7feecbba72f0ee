"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the chat service (`service.chat`) is given and gives back: who asks (`Caller`), a plain request's finished run
(`Answered`) and a streamed one ready to run (`Streaming`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core import Plan
from ..events import AnswerChunks, RunRecord, StageFinished

# Runs a streamed request with a sink for its answer's chunks (and one for the progress of its earlier stages, or
# None); returns the finished record.
RunStreamer = Callable[
    [Callable[[AnswerChunks], Awaitable[None]], Callable[[StageFinished], Awaitable[None]] | None],
    Awaitable[RunRecord],
]


class Caller(NamedTuple):
    """Who asks: the name of the named key it came with (`[[auth.keys]]`; None: a nameless key, or no auth) and its
    own token, sent only to targets with `forward_client_authorization`. (A tuple: made for every request.)"""

    name: str | None = None
    token: str | None = None
    route: str | None = None  # the request's `x-adapter-critic-route` header: what an `auto` model's rules may read


@dataclass(slots=True)
class Answered:
    """A plain request's finished run (or cache hit): its record, and the headers its answer carries (the limits',
    the cache's)."""

    record: RunRecord
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Streaming:
    """A streamed request's run, ready to run: `run` runs it into the sinks it is given. `record` is its record as
    it goes (None for a cache hit, known whole)."""

    run: RunStreamer
    plan: Plan
    headers: dict[str, str] = field(default_factory=dict)
    record: RunRecord | None = None
