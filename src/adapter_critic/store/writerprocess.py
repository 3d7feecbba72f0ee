"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`WriterProcess`: a server's handle on its store's writer process (`python -m adapter_critic.store.writer`), which
makes a batch's rows and writes them off the server's interpreter and core.

The process is started at the first batch (a server that records nothing starts none) with the standard
library's `asyncio.create_subprocess_exec`: its own interpreter, its standard input and output two pipes to this
one, no other file of the server's (not its listening socket). A batch is one write of its frame (`wire.frame`) to
the pipe, and the store waits for its `wire.Ack` — one batch at a time, so what the pipe holds is bounded by a
batch; records queued meanwhile wait in the store's bounded queue (dropped and counted when it is full).

A writer that dies (killed, out of memory) loses the batch it was writing — none of it, if it died before its
commit; all of it, if after — and is logged once, as a warning naming the signal and the records lost; the next
batch starts a new one. A writer that dies before its first answer leaves its batch to the store to write in the
server's process (it cannot start: a missing module, no interpreter); when `STARTS` in a row do, the store writes
in its own process from then on (`WriterUnavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from ..errors import StoreError
from . import sqlitefile
from .wire import HEAD, Ack, ack_decoder, url_frame

logger = logging.getLogger("adapter_critic")

STARTS = 3  # writers in a row that die before their first answer before the store writes in its own process
PIPE_BYTES = 1 << 20  # the pipe's size asked for (Linux's default upper bound for it)
PIECE_BYTES = 1 << 16  # how much of a frame is written at once (`_send`): some 25 direct runs
_F_SETPIPE_SZ = 1031
CLOSE_SECONDS = 30.0  # how long a closing store waits for its writer to finish before killing it
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory `adapter_critic` is imported from


class WriterDied(StoreError):
    """The writer process died with the batch (logged). `answered`: it had written batches before — this one is lost
    (it may be written, if the writer died after its commit); else the writer never started, and the batch is the
    caller's to write."""

    def __init__(self, answered: bool) -> None:
        super().__init__("the store's writer process died")
        self.answered = answered


class WriterUnavailable(StoreError):
    """No writer process could be started: the store writes in its own process."""


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "closed its pipe"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


class WriterProcess:
    """The store's writer process (see the module docstring): `write` a batch's frame, `aclose` at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid: int | None = None  # the process writing now (None: none started, or it died)
        self.restarts = 0  # writers started after one died
        self._process: asyncio.subprocess.Process | None = None
        self._answered = False  # the current process has answered a batch
        self._failed_starts = 0
        self._one = anyio.Lock()

    @property
    def running(self) -> asyncio.subprocess.Process | None:
        """The writer process now (None: none started yet, or it died and the next batch starts one)."""
        return self._process

    async def _start(self) -> asyncio.subprocess.Process:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "adapter_critic.store.writer",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        assert process.stdin is not None
        pipe = process.stdin.transport.get_extra_info("pipe")
        if sys.platform == "linux" and pipe is not None:
            import fcntl

            # More than a pipe's 64 KiB: a batch in a write or a few (a pipe already closed: the writer died).
            with contextlib.suppress(OSError, ValueError):
                fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        process.stdin.write(url_frame(self.url, sqlitefile.WRITER_NICE))
        self._process, self.pid, self._answered = process, process.pid, False
        return process

    async def write(self, head: bytes, records: list[bytes], seq: int, hurry: bool = False) -> str | None:
        """Send a batch's frame (`wire.frame_head`, then its encoded records, which are let go of once sent: a big
        answer's bytes are not held while the writer writes) and wait for its answer: None when it is written, why
        not when the writer could not write it. `WriterDied` when the writer died with it, `WriterUnavailable` when
        none can be started. Once sent, a batch is waited for even if the caller is cancelled (the next one waits
        behind it). `hurry`: the queue backs up (`writes.urgent`), so the frame is written in one go, not in pieces
        between which a busy event loop's turn would make every piece wait."""
        async with self._one:
            with anyio.CancelScope(shield=True):
                error = await self._write(head, records, seq, hurry)
        return error

    async def _write(self, head: bytes, records: list[bytes], seq: int, hurry: bool) -> str | None:
        process = self._process
        if process is not None and (process.returncode is not None or _at_eof(process)):
            await self._gone(process, 0)  # it died between batches: nothing of this batch is lost
            process = None
        if process is None:
            if self._failed_starts >= STARTS:
                raise WriterUnavailable
            process = await self._start()
        assert process.stdin is not None and process.stdout is not None
        count = len(records)
        with contextlib.suppress(ConnectionError):  # it died: its answer will not come
            await _send(process.stdin, head, records, PIPE_BYTES if hurry else PIECE_BYTES)
        records.clear()
        while True:
            try:
                length, _ = HEAD.unpack(await process.stdout.readexactly(HEAD.size))
                ack: Ack = ack_decoder.decode(await process.stdout.readexactly(length))
            except (asyncio.IncompleteReadError, ConnectionError):
                answered = self._answered
                await self._gone(process, count)
                raise WriterDied(answered) from None
            self._answered, self._failed_starts = True, 0
            if ack.seq == seq:
                return ack.error

    async def _gone(self, process: asyncio.subprocess.Process, lost: int) -> None:
        """The writer `process` died (losing `lost` records, if it had started): logged once, and the next batch
        starts a new one."""
        code = await process.wait()
        self._process, self.pid = None, None
        if not self._answered:
            self._failed_starts += 1
            logger.log(
                logging.ERROR if self._failed_starts >= STARTS else logging.WARNING,
                "run store: the writer process (pid %d) %s before writing anything (%d time(s) in a row); its batch "
                "is written in the server's process%s",
                process.pid,
                _exit_reason(code),
                self._failed_starts,
                ", and so is every batch from now on (see the writer's errors above)"
                if self._failed_starts >= STARTS
                else "",
            )
            return
        self.restarts += 1
        logger.warning(
            "run store: the writer process (pid %d) %s; %d record(s) of the batch it was writing lost; a new writer "
            "process takes the next batches",
            process.pid,
            _exit_reason(code),
            lost,
        )

    async def aclose(self) -> None:
        """Let the writer finish and exit (its input closed); killed after `CLOSE_SECONDS`."""
        async with self._one:
            process, self._process = self._process, None
            if process is None:
                return
            assert process.stdin is not None
            process.stdin.close()
            try:
                with anyio.fail_after(CLOSE_SECONDS):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


async def _send(pipe: asyncio.StreamWriter, head: bytes, records: Sequence[bytes], piece: int) -> None:
    """A frame written a piece at a time (`piece` bytes of records, joined), the event loop free to serve requests
    between two pieces: a batch of a busy second, written and copied in one go, held the loop for a fraction of a
    millisecond, a tail for every request ready meanwhile. A record of a piece or more (a big answer) is written
    from itself, a piece at a time, never copied whole: joined, and held in the pipe's buffer while the writer read
    it, a 16 MiB answer was two more 16 MiB blocks, which the server's heap grew for and the kernel faulted in."""
    part = [head]
    size = len(head)
    for record in records:
        if len(record) >= piece:
            pipe.write(b"".join(part))
            part, size = [], 0
            whole = memoryview(record)
            for start in range(0, len(record), piece):
                pipe.write(whole[start : start + piece])
                await pipe.drain()  # waits while the pipe is full
            continue
        part.append(record)
        size += len(record)
        if size >= piece:
            pipe.write(b"".join(part))
            part, size = [], 0
            await pipe.drain()
            await asyncio.sleep(0)
    if part:
        pipe.write(b"".join(part))
        await pipe.drain()


def _at_eof(process: asyncio.subprocess.Process) -> bool:
    return process.stdout is not None and process.stdout.at_eof()
