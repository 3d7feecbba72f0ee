"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Outbox`: a run store's queued records as its writer process takes them (`wire.encode`d as they are queued, on the
request's task), for a store that writes through one (`runstore`, `writerprocess`).

It also keeps the outputs of the stages queued for the next frame, per run, so that a run's end queued in the same
frame refers to them rather than sending the text again (`wire.encode`'s `outputs`): a direct run's answer is its
stage's output and its final note, and a 16 MiB answer sent three times cost the server three encodings and the
writer three decodings (`benchmarks/sizes.py`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from . import wire
from .recorder import Record, RunClosed, StageDone


class Outbox:
    """The encoded records of a store's queue, in its order."""

    def __init__(self) -> None:
        self._encoded: collections.deque[bytes] = collections.deque()
        # Per run, the (index, output) of its stages queued since the last frame was taken: they go in the next one.
        self._outputs: dict[str, list[tuple[int, str]]] = {}

    def add(self, record: Record, next_frame: bool) -> None:
        """Encode `record`; `next_frame`: it is sure to go in the next frame taken (the queue before it is shorter
        than a batch). Raises as `wire.encode` does (the record is not added)."""
        kind = type(record)
        outputs: list[tuple[int, str]] | tuple[()] = ()
        if kind is RunClosed:
            outputs = self._outputs.pop(record.run_id, ())
            if not next_frame:  # its stages' records may go in a frame before it: their texts are sent again
                outputs = ()
        self._encoded.append(wire.encode(record, outputs))
        if kind is StageDone:
            assert isinstance(record, StageDone)
            output = record.finished.output
            if output:
                self._outputs.setdefault(record.run_id, []).append((record.index, output))

    def extend(self, records: Iterable[Record]) -> None:
        """Encode records queued before the writer process was there, each on its own."""
        self._encoded.extend(wire.encode(record) for record in records)

    def take(self, count: int) -> list[bytes]:
        """The next frame's records: the first `count`. A stage left behind is no longer referred to."""
        self._outputs.clear()
        return [self._encoded.popleft() for _ in range(count)]

    def clear(self) -> None:
        self._encoded.clear()
        self._outputs.clear()
