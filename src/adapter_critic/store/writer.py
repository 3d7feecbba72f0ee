"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The store's writer process: `python -m adapter_critic.store.writer`, started by a server's store
(`writerprocess.WriterProcess`), never by hand. It reads the store's URL and then batches (`wire.frame`) on its
standard input, rebuilds each batch's records (`records`), makes their rows (`writes.batch_rows`, secrets masked
with the batch's own) and writes them in one transaction (`Database.write_made`), and answers each batch on its
standard output (`wire.Ack`) once it is written or has failed.

It exits when its input ends — the server closed the store, or is gone — after the batch it has, so it never
outlives the server. It ignores SIGINT and SIGTERM, which a terminal or a service manager sends to every process
of the server's group at once: the server closes the store (which drains the queue into this process) first.
It makes and writes each batch on a thread at the lowest priority (`sqlitefile.WRITER_NICE`, which the server
sends it), or, once the server's queue backed up (`wire.Head.behind`), for a minute (`PROMPT_SECONDS`) on one at the
server's own: on a machine kept busy on every core the lowest priority gets next to nothing, and the server's queue
overflowed while a batch waited at it (`python -m benchmarks.keeps_up` beside two busy loops: 10,193 runs of 40,000
stored; with the queue's state alone, per batch, 32,191; with the minute, every one). When the server
is pinned to some of the machine's cores (`taskset`, a cpuset), it runs on the others (`off_the_servers_cores`): the
rows and the write take neither the server's interpreter nor its core. (At home on the server's cores, moved to
the others only when the queue backed up, it kept a saturated server's queue from draining: `benchmarks/README.md`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, BinaryIO, cast

import msgspec

from ..core import Answer, ChatRequest
from ..errors import UpstreamError
from ..events import Attempt, StageFinished
from . import sqlitefile
from .cleaning import Cleaner
from .database import Database, reason
from .recorder import CachePut, Record, RunClosed, RunOpened, StageDone
from .wire import (
    HEAD,
    Ack,
    Head,
    Wire,
    WireCachePut,
    WireClosed,
    WireError,
    WireFeedback,
    WireFinished,
    WireOpened,
    WireStage,
    ack_frame,
    body_decoder,
    head_decoder,
)
from .writes import BatchRows, batch_rows


def off_the_servers_cores() -> None:
    """Run on the cores the server (this process's parent, whose affinity it inherited) is not pinned to, when it is
    pinned to some; else where it is. Where that is not allowed (a cpuset), nothing changes."""
    if not hasattr(os, "sched_getaffinity"):
        return
    own = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - own
    if others:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, others)


def records(wires: Sequence[Wire]) -> list[Record]:
    """The records `wire.encode` sent, rebuilt as the server made them (what the rows are made from)."""
    built = [_record(wire) for wire in wires]
    outputs: dict[tuple[str, int], str | None] = {}  # the frame's stages' outputs so far, by run and index
    for record, wire in zip(built, wires, strict=True):
        kind = type(wire)
        if kind is WireStage:
            stage = cast(StageDone, record)
            outputs[stage.run_id, stage.index] = stage.finished.output
        elif kind is WireClosed:
            _refer(cast(RunClosed, record), cast(WireClosed, wire), outputs)
    return built


def _refer(closed: RunClosed, wire: WireClosed, outputs: dict[tuple[str, int], str | None]) -> None:
    """Put back the texts `wire` sent as a stage's index: that stage's output, the same string, as the server had it
    (the rows keep it once, in the stage). The stage's record is in the frame before it (`wire.encode`)."""
    if wire.content_stage is not None:
        closed.answer.content = outputs.get((closed.run_id, wire.content_stage))
    if wire.intermediate_stages:
        for key, index in wire.intermediate_stages.items():
            closed.intermediate[key] = outputs.get((closed.run_id, index))


def _record(wire: Wire) -> Record:
    kind = type(wire)
    if kind is WireStage:
        stage = cast(WireStage, wire)
        messages = None if stage.messages is None else msgspec.Raw(stage.messages)
        return StageDone(
            stage.run_id,
            stage.index,
            _stage_finished(stage.finished),
            stage.started_offset_ms,
            messages,
            stage.capture,
            stage.secret,
            stage.request_messages,
        )
    if kind is WireOpened:
        opened = cast(WireOpened, wire)
        options = _options.decode(opened.options)
        messages = msgspec.Raw(opened.messages if opened.messages is not None else b"[]")
        request = ChatRequest("", [], messages, options)  # `options` holds `stream` and the overrides already
        return RunOpened(
            opened.run_id,
            opened.request_id,
            opened.served_model,
            opened.mode,
            opened.stream,
            opened.started_at,
            opened.capture,
            request,
            opened.secret,
            opened.key_name,
            opened.parent_run_id,
            opened.parent_stage,
            opened.cached_from,
        )
    if kind is WireClosed:
        closed = cast(WireClosed, wire)
        # The tool calls as the JSON array they were: the rows encode the value as it is.
        tool_calls = None if closed.tool_calls is None else cast(list[Any], msgspec.Raw(closed.tool_calls))
        intermediate = {} if closed.intermediate is None else _intermediate.decode(closed.intermediate)
        return RunClosed(
            closed.run_id,
            closed.status,
            closed.finished_at,
            closed.duration_ms,
            closed.usage,
            closed.error,
            intermediate,
            Answer(closed.content, tool_calls, closed.finish_reason),
            closed.capture,
            closed.secret,
            closed.cost,
        )
    if kind is WireCachePut:
        put = cast(WireCachePut, wire)
        raw = msgspec.Raw(put.entry)
        return CachePut(put.key, put.run_id, put.served_model, raw, put.created_at, put.expires_at, put.secret)
    return cast(WireFeedback, wire).given


_options = msgspec.json.Decoder(dict[str, msgspec.Raw])
_intermediate = msgspec.json.Decoder(dict[str, Any])  # values compared with stage outputs (`rows`)


def _upstream_error(error: WireError | None) -> UpstreamError | None:
    if error is None:
        return None
    return UpstreamError(
        stage=error.stage,
        target=error.target,
        kind=cast(Any, error.kind),
        detail=error.detail,
        upstream_status=error.upstream_status,
    )


def _stage_finished(wire: WireFinished) -> StageFinished:
    return StageFinished(
        wire.stage,
        wire.target,
        tuple(Attempt(a.target, _upstream_error(a.error)) for a in wire.attempts),
        wire.usage,
        wire.elapsed_ms,
        wire.output,
        _upstream_error(wire.error),
        wire.reported,
        wire.finish_reason,
        wire.cost,
        wire.child,
    )


def _say(message: str) -> None:
    """A line on the standard error, which is the server's (the store's own log lines are the server's logger's)."""
    print(f"adapter_critic: run store writer process (pid {os.getpid()}): {message}", file=sys.stderr, flush=True)


def _answer(out: BinaryIO, ack: Ack) -> None:
    out.write(ack_frame(ack))
    out.flush()


def _read(source: io.RawIOBase, size: int) -> bytearray | None:
    """The next `size` bytes of the pipe, read into one buffer: a frame's body is copied once on its way from the
    kernel, whatever its size (a stream reader's buffer grew by copies, and copied it out again). None at its end."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        count = source.readinto(view[got:])
        if not count:
            return None
        got += count
    return buffer


def _frame(source: io.RawIOBase) -> tuple[Head, bytearray] | None:
    """The next frame's header and body; None when the server closed the pipe (or is gone)."""
    lengths = _read(source, HEAD.size)
    if lengths is None:
        return None
    head_length, body_length = HEAD.unpack(lengths)
    head, body = _read(source, head_length), _read(source, body_length)
    return None if head is None or body is None else (head_decoder.decode(head), body)


WRITING, CATCHING_UP = "store-writer", "store-catch-up"  # the two threads' names (`top -H`, /proc/<pid>/task)
PROMPT_SECONDS = 60.0  # once the server's queue backed up, how long every batch is written at the server's priority


def _rows(body: bytearray, head: Head) -> BatchRows:
    """A frame's rows: its records rebuilt, made into rows with the batch's secrets masked."""
    return batch_rows(records(body_decoder.decode(body)), head.instance, Cleaner(head.secrets))


def _thread(name: str, nice: int = 0) -> None:
    """The calling thread named `name` where `top -H` and /proc show it, and lowered by `nice` (Linux, where both
    are a thread's own: `sqlitefile.lower_priority`)."""
    with contextlib.suppress(OSError), open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(name)
    if nice:
        sqlitefile.lower_priority(nice)


def _threads(nice: int) -> tuple[Executor, Executor]:
    """Where a batch is made and written: (the thread at the lowest priority, the one at the server's, started at the
    first batch behind). A nice value is a thread's own on Linux; elsewhere it is the whole process's, which is
    lowered, and both are one thread."""
    if sys.platform != "linux":
        with contextlib.suppress(OSError):
            os.nice(nice)
        only = ThreadPoolExecutor(1)
        return only, only
    calm = ThreadPoolExecutor(1, initializer=_thread, initargs=(WRITING, nice))
    return calm, ThreadPoolExecutor(1, initializer=_thread, initargs=(CATCHING_UP,))


async def serve(source: io.RawIOBase, out: BinaryIO) -> None:
    """Write the frames read from `source` (the URL's first), answering each on `out`, until `source` ends. The
    reads wait in a thread; each batch is made and written on the thread its frame asks for (`wire.Head.behind`)."""
    first = _read(source, HEAD.size)
    if first is None:
        return
    url_length, nice = HEAD.unpack(first)
    url = _read(source, url_length)
    if url is None:
        return
    loop = asyncio.get_running_loop()
    calm, prompt = _threads(nice)
    prompt_until = 0.0
    database = Database(url.decode("utf-8"))
    try:
        while (frame := await asyncio.to_thread(_frame, source)) is not None:
            head, body = frame
            if head.behind:
                if time.monotonic() >= prompt_until:
                    _say(f"the server's queue backs up: writing at the server's priority for {PROMPT_SECONDS:.0f} s")
                prompt_until = time.monotonic() + PROMPT_SECONDS
            thread = prompt if time.monotonic() < prompt_until else calm
            error = None
            try:
                await database.write_made(await loop.run_in_executor(thread, _rows, body, head), thread)
            except Exception as exc:  # the server counts the batch as failed and logs why
                error = reason(exc)
            _answer(out, Ack(head.seq, error))
    finally:
        await database.aclose()
        calm.shutdown()
        prompt.shutdown()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    off_the_servers_cores()
    # Acks go to the pipe the server reads; anything else printed goes to the server's standard error.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    with open(0, "rb", buffering=0) as source:
        asyncio.run(serve(source, out))


if __name__ == "__main__":
    main()
