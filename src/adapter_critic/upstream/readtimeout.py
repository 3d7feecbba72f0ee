"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

aiohttp's read timeout (`sock_read`: how long an upstream may send nothing), with its timer moved lazily.

aiohttp restarts a connection's read timeout at every read: the timer is cancelled and a new one made
(`ResponseHandler._reschedule_timeout`). A streamed answer is read a token at a time, so that was a timer made and
cancelled for every token, some 4 µs of each paced chunk's CPU (`benchmarks/paced.py`). `LazyReadTimeout` makes the
timer once and only notes when the timeout is now due at each read; when the timer fires it times out if nothing
came since it was set, else it waits for what is left. The timeout is the same — nothing read for `sock_read`
seconds — and a read costs a clock read.

`lazy_read_timeouts(connector)` makes the connector's new connections `LazyReadTimeout`s. With an aiohttp whose
connector or handler do not look as this expects, it changes nothing and says so (False, and a warning in the log).

It builds on aiohttp's private names (`missing()` lists those an installed aiohttp lacks), so pyproject.toml pins
aiohttp to the minor versions it was measured on (3.14: 3.14.5), and tests/upstream/test_readtimeout.py fails on an
aiohttp without them. Before widening the pin: that test, then `benchmarks/paced.py` against this tree, to see
whether the subclass still saves what it did.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

try:
    from aiohttp.client_proto import ResponseHandler
except ImportError:  # the plain-httpx install
    ResponseHandler = None  # type: ignore[assignment,misc]

__all__ = ["lazy_read_timeouts", "missing"]

logger = logging.getLogger("adapter_critic")

# What `LazyReadTimeout` builds on: the handler's methods it overrides or calls, and the attributes a handler sets
# (`_loop`, `_read_timeout`, `_read_timeout_handle`). An aiohttp without them keeps its own handler.
_METHODS = ("_reschedule_timeout", "_drop_timeout", "_on_read_timeout")
_ATTRIBUTES = ("_loop", "_read_timeout", "_read_timeout_handle")


def missing() -> list[str]:
    """The private names of aiohttp's `ResponseHandler` that `LazyReadTimeout` builds on and the installed aiohttp
    lacks (none: it can be used; every one without aiohttp)."""
    if ResponseHandler is None:
        return [*_METHODS, *_ATTRIBUTES]
    gone = [name for name in _METHODS if not callable(getattr(ResponseHandler, name, None))]
    try:
        probe = ResponseHandler(loop=_NoLoop())  # type: ignore[arg-type]
    except Exception:  # a handler made otherwise than with its loop alone
        return [*gone, "ResponseHandler(loop)"]
    return gone + [name for name in _ATTRIBUTES if not hasattr(probe, name)]


class _NoLoop:
    """The loop a probe handler is made with (`missing`): one it never uses."""


def lazy_read_timeouts(connector: Any) -> bool:
    """Make the connections `connector` opens from now on `LazyReadTimeout`s; whether it did."""
    factory = getattr(connector, "_factory", None)
    if ResponseHandler is None or not isinstance(factory, functools.partial) or factory.func is not ResponseHandler:
        return False
    if _missing:
        logger.warning(
            "aiohttp's read timeout keeps a timer per read: this aiohttp lacks %s (pyproject.toml pins the versions "
            "upstream/readtimeout.py was measured on)",
            ", ".join(_missing),
        )
        return False
    connector._factory = functools.partial(LazyReadTimeout, *factory.args, **factory.keywords)
    return True


if ResponseHandler is not None:

    class LazyReadTimeout(ResponseHandler):
        """aiohttp's connection protocol, its read timeout's timer made once per wait instead of once per read."""

        _read_due = 0.0  # when the read timeout is due: the last read's time plus the timeout

        def _reschedule_timeout(self) -> None:
            timeout = self._read_timeout
            if not timeout:
                self._drop_timeout()
                return
            due = self._read_due = self._loop.time() + timeout
            handle = self._read_timeout_handle
            if handle is not None:
                if handle.when() <= due:
                    return  # it fires in time, and then waits for what is left
                handle.cancel()  # a shorter timeout than the one it was set for
            self._read_timeout_handle = self._loop.call_at(due, self._read_timer)

        def _read_timer(self) -> None:
            if self._loop.time() < self._read_due:  # something was read since it was set
                self._read_timeout_handle = self._loop.call_at(self._read_due, self._read_timer)
                return
            self._read_timeout_handle = None
            self._on_read_timeout()


_missing = missing()  # once: an installed aiohttp does not change
