"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A client that goes away before its answer is sent is an ordinary event: the request's run is cancelled and one
INFO line with the request id says so — never a traceback.

The server says the client is gone in one of two ways:

- `receive` returns `http.disconnect`. uvicorn does so as soon as the connection closes, which it also does when
  the client only shuts down its sending side after the request (a half-close); its `send` then drops what it is
  given. `cancel_on_disconnect` watches for this while a plain answer is worked out (the stream writer has its
  own watcher, which also sends the keep-alives).
- `send` raises because the connection is closed: an `OSError` (ASGI 2.4), or, from a server that writes to a
  closed uvloop transport, `RuntimeError: unable to perform operation on <TCPTransport closed=True ...>; the
  handler is closed`. `guard_send` turns these into `ClientGone`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
from starlette.types import Message, Receive, Send

from ..errors import AdapterCriticError
from ..observe.logs import current_request_id
from ..timelimit import on_asyncio

logger = logging.getLogger("adapter_critic")

T = TypeVar("T")


class ClientGone(AdapterCriticError):
    """The client's connection closed before the answer was sent: nothing more can reach it."""


def guard_send(send: Send) -> Send:
    """`send`, raising `ClientGone` where the server raises because the client's connection is closed.

    A `send` this already guards is given back as it is: the chat handler guards the request's `send` and the
    stream writer the one it is given, and a wrapper more would be paid again for every streamed chunk."""
    if getattr(send, _GUARDED, False):
        return send

    async def guarded(message: Message) -> None:
        try:
            await send(message)
        except (OSError, RuntimeError) as exc:
            if not connection_closed(exc):
                raise  # an ASGI protocol error of ours (a message out of order) is a bug, not a disconnect
            raise ClientGone(str(exc)) from exc

    setattr(guarded, _GUARDED, True)  # marked as a guard (mypy does not let a function attribute be assigned)
    return guarded


_GUARDED = "_guards_client_gone"


def connection_closed(exc: BaseException) -> bool:
    """Whether `exc`, raised by the server's `send`, says that the client's connection is closed."""
    return isinstance(exc, OSError) or (isinstance(exc, RuntimeError) and "closed=True" in str(exc))


def log_client_gone(request_id: str) -> None:
    """The one line a request whose client went away leaves in the log (inside the request's log scope, the
    line starts with `[request_id]` like every other line of the request)."""
    if current_request_id() == request_id:
        logger.info("the client went away; the request is cancelled")
    else:
        logger.info("[%s] the client went away; the request is cancelled", request_id)


# A plain request only starts watching for its client after this long: most answers come sooner, and a watcher
# for each of them would cost more than the little upstream work a client that left that early leaves behind.
WATCH_AFTER_SECONDS = 0.05


async def cancel_on_disconnect(receive: Receive, request_id: str, work: Callable[[], Awaitable[T]]) -> T | None:
    """`await work()`, cancelled if the client disconnects first; then None, and the disconnect is logged.

    For a request whose body has been read: `receive` then only ever says `http.disconnect`. It is
    cancellation-safe, so stopping the watch when `work` is done loses nothing (`watched`)."""

    async def watch(cancel: Callable[[], object]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        log_client_gone(request_id)
        cancel()

    return await watched(work, watch)


Watch = Callable[[Callable[[], object]], Coroutine[Any, Any, None]]


async def watched(work: Callable[[], Awaitable[T]], watch: Watch) -> T | None:
    """`await work()` with `watch(cancel)` beside it, cancelled when the work ends; `cancel()` cancels the work, which
    then gives None.

    This runs for every request, plain or streamed. On asyncio the watch is a bare task, started only once the work
    has taken `WATCH_AFTER_SECONDS` (a timer costs a fraction of a task, and most answers are out sooner), and
    `cancel()` cancels the work's own task — no cancel scope around it: the cancellation is told apart from any other
    by the task's count of them, and taken back. Elsewhere the watch is a child of an anyio task group, started at
    once (cancelling such a child costs some 60 µs, which asyncio's requests do not pay)."""
    if not on_asyncio():
        return await _in_task_group(work, watch)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    watcher: asyncio.Task[None] | None = None
    cancelled = False

    def cancel() -> None:
        nonlocal cancelled
        cancelled = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = loop.create_task(watch(cancel))

    timer = loop.call_later(WATCH_AFTER_SECONDS, start_watching)
    try:
        result = await work()
    except asyncio.CancelledError:
        if cancelled and task.uncancel() == 0:
            return None  # cancelled by the watch alone: the work ends here
        raise
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
    if cancelled:  # the work ended anyway after the watch cancelled it
        task.uncancel()
        return None
    return result


async def _in_task_group(work: Callable[[], Awaitable[T]], watch: Watch) -> T | None:
    scope = anyio.CancelScope()
    result: T | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, scope.cancel)
        with scope:
            result = await work()
        tg.cancel_scope.cancel()  # the work is done: stop the watch
    return None if scope.cancel_called else result
