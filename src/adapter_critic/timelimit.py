"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Awaiting something within a time limit, on whichever async library runs it.

anyio's `fail_after` makes a cancel scope and looks up the running backend and the current task: some 12 µs each
time, and every plain upstream call pays it. On asyncio, `asyncio.timeout` does the same job (a timer that cancels
the task, turned into `TimeoutError` on the way out) for a third of that; on any other backend anyio's own is used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import anyio
import sniffio

__all__ = ["on_asyncio", "within"]

T = TypeVar("T")


def on_asyncio() -> bool:
    """Whether this runs on asyncio (where asyncio's own primitives are cheaper than anyio's)."""
    return sniffio.current_async_library() == "asyncio"


async def within(seconds: float | None, work: Awaitable[T]) -> T:
    """`await work`, raising `TimeoutError` if it has not finished after `seconds` (None: no limit); it is then
    cancelled."""
    if on_asyncio():
        async with asyncio.timeout(seconds):
            return await work
    with anyio.fail_after(seconds):
        return await work
