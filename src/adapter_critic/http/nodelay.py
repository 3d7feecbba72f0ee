"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`TCP_NODELAY` on every connection of the standalone server, however its listening socket was created.

Without it, a small write that follows another one unacknowledged (the last event of a stream, an answer
sent as headers then body) waits for the client's delayed ACK: up to 40 ms on Linux. The event loop sets it
on connections it accepts from a listener it made itself (`uvicorn --host/--port`), but not on connections
from a listener it was handed: `uvicorn --fd`, the sockets `--workers` and `--reload` share, gunicorn's and
systemd's. Setting it on the listener does not help either: Linux does not copy it to accepted sockets.

So `install` hooks uvicorn's HTTP protocols (`connection_made`, called once per accepted connection with its
transport) to set it on the connection's socket: once per connection, nothing per request. The hook is put in
place when `adapter_critic.asgi` is imported, which uvicorn does before it accepts any connection; with another
server, or a uvicorn whose protocols look different, nothing is changed.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import socket
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("adapter_critic")

# uvicorn's HTTP protocol classes (`--http auto` is one of them), by module.
_PROTOCOLS = (
    ("uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol"),
    ("uvicorn.protocols.http.h11_impl", "H11Protocol"),
)


def install() -> int:
    """Hook every importable uvicorn HTTP protocol (once); returns how many are hooked."""
    hooked = 0
    for module_name, class_name in _PROTOCOLS:
        try:
            protocol = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):  # uvicorn absent, httptools not installed, or renamed
            continue
        original = getattr(protocol, "connection_made", None)
        if original is None:
            continue
        if not getattr(original, "_sets_nodelay", False):
            protocol.connection_made = _with_nodelay(original)
        hooked += 1
    return hooked


def _with_nodelay(connection_made: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def with_nodelay(self: Any, transport: Any) -> None:
        set_nodelay(transport.get_extra_info("socket"))
        connection_made(self, transport)

    with_nodelay._sets_nodelay = True  # type: ignore[attr-defined]
    return with_nodelay


def set_nodelay(sock: Any) -> None:
    """`TCP_NODELAY` on a TCP socket; a Unix socket refuses it and is left alone. The socket object's `family`
    is not asked: uvicorn wraps a `--fd` descriptor as `AF_UNIX` whatever it is (which is also why the event
    loop skips it)."""
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
