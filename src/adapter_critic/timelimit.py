"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A block of work within a time limit, on whichever async library runs it.

anyio's `fail_after` makes a cancel scope and looks up the running backend and the current task: some 12 µs each
time, and every plain upstream call pays it. On asyncio, `asyncio.timeout` does the same job (a timer that cancels
the task, turned into `TimeoutError` on the way out) for a third of that; on any other backend anyio's own is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import types

import anyio
import sniffio

__all__ = ["on_asyncio", "time_limit"]


def on_asyncio() -> bool:
    """Whether this runs on asyncio (where asyncio's own primitives are cheaper than anyio's)."""
    return sniffio.current_async_library() == "asyncio"


def time_limit(seconds: float | None) -> contextlib.AbstractAsyncContextManager[object]:
    """An `async with` block that raises `TimeoutError` if it has not finished after `seconds` (None: no limit); it
    is then cancelled. A block rather than a coroutine to await: no frame more around the work."""
    if on_asyncio():
        return asyncio.timeout(seconds)
    return _FailAfter(seconds)


class _FailAfter:
    """anyio's `fail_after` as an `async with` block (any backend but asyncio)."""

    def __init__(self, seconds: float | None) -> None:
        self._scope = anyio.fail_after(seconds)

    async def __aenter__(self) -> object:
        return self._scope.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> bool:
        return bool(self._scope.__exit__(kind, exc, tb))
