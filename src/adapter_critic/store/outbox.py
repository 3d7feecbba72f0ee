"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Outbox`: what a run store sends its writer process (`writerprocess`), for a store that writes through one
(`runstore`): the queue's records `wire.encode`d as they are queued, on the request's task, and each batch of them
sent as one frame (`send`).

It also keeps the outputs of the stages queued for the next frame, per run, so that a run's end queued in the same
frame refers to them rather than sending the text again (`wire.encode`'s `outputs`): a direct run's answer is its
stage's output and its final note, and a 16 MiB answer sent three times cost the server three encodings and the
writer three decodings (`benchmarks/sizes.py`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

from . import wire
from .recorder import Record, RunClosed, StageDone
from .writerprocess import WriterDied, WriterProcess, WriterUnavailable


class Outbox:
    """The encoded records of a store's queue, in its order, and the writer process they go to (`process`: None
    before `open`, and once no writer process can be had — the store then writes in its own)."""

    def __init__(self) -> None:
        self.process: WriterProcess | None = None
        self._seq = 0
        self._encoded: collections.deque[bytes] = collections.deque()
        # Per run, the (index, output) of its stages queued since the last frame was taken: they go in the next one.
        self._outputs: dict[str, list[tuple[int, str]]] = {}

    def open(self, url: str, queued: Iterable[Record]) -> None:
        """Send batches to a writer process for the database at `url` (started at the first), the records `queued`
        before now included."""
        self.process = WriterProcess(url)
        self._encoded.extend(wire.encode(record) for record in queued)

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

    def take(self, count: int) -> list[bytes]:
        """The next frame's records: the first `count`. A stage left behind is no longer referred to."""
        self._outputs.clear()
        return [self._encoded.popleft() for _ in range(count)]

    async def send(self, count: int, instance: str, secrets: Sequence[str], hurry: bool, behind: bool) -> bool:
        """Send the next `count` records to the writer process as one frame and wait until they are written: True;
        False when there is no writer to be had (the store writes this batch itself, and every one after when none
        can be started). `hurry`: the frame is written in one go; `behind`: the store's queue backs up, and the
        writer writes the batch at the server's priority (`wire.Head`). A batch the writer could not write raises,
        as a write in the store's process does (`WriterDied` when the writer died with it)."""
        assert self.process is not None
        encoded = self.take(count)
        self._seq += 1
        head = wire.frame_head(self._seq, instance, secrets, encoded, hurry, behind)
        try:
            error = await self.process.write(head, encoded, self._seq, hurry)
        except WriterUnavailable:
            self.process = None
            self._encoded.clear()
            self._outputs.clear()
            return False
        except WriterDied as died:
            if died.answered:
                raise
            return False  # it never started: the batch is written in the store's process
        if error is not None:
            raise RuntimeError(error)
        return True

    async def aclose(self) -> None:
        if self.process is not None:
            await self.process.aclose()
