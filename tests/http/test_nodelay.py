"""The standalone server sets `TCP_NODELAY` on its connections also when uvicorn is handed its socket (`--fd`,
as `run_server` does), with each event loop and HTTP implementation.

The option is read on the server's own end of the connection: the test process takes a copy of the server's
descriptors (Linux `pidfd_getfd`, allowed for a child process) and finds the one whose peer is the test's
client socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import socket
from collections.abc import Iterator

import pytest

from adapter_critic.http.nodelay import install

from ..conftest import UVICORN, run_server

SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
_libc = ctypes.CDLL(None, use_errno=True)


def server_end(pid: int, client: socket.socket) -> socket.socket:
    """A copy of the server's socket for `client`'s connection."""
    pidfd = _libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    assert pidfd >= 0, os.strerror(ctypes.get_errno())
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            fd = _libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                continue  # closed meanwhile
            try:
                sock = socket.socket(fileno=fd)
            except OSError:
                os.close(fd)  # not a socket
                continue
            with contextlib.suppress(OSError):
                if sock.getpeername() == client.getsockname():
                    return sock
            sock.close()
    finally:
        os.close(pidfd)
    raise AssertionError("the server holds no socket for this connection")


@contextlib.contextmanager
def connected(extra: list[str]) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A standalone server (`--fd`), and a connection to it that has been answered: (client end, server end)."""
    with run_server([*UVICORN, *extra]) as (url, proc):
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", "/v1/health")
            response = connection.getresponse()
            assert response.status == 200 and response.read() == b'{"status":"ok"}'
            assert connection.sock is not None
            with server_end(proc.pid, connection.sock) as server_sock:
                yield connection.sock, server_sock
        finally:
            connection.close()


@pytest.mark.parametrize(
    "extra",
    [[], ["--loop", "asyncio"], ["--loop", "uvloop", "--http", "httptools"], ["--loop", "asyncio", "--http", "h11"]],
    ids=["auto", "asyncio", "uvloop-httptools", "asyncio-h11"],
)
def test_connections_of_a_server_handed_its_socket_set_tcp_nodelay(extra: list[str]) -> None:
    with connected(extra) as (_, server_sock):
        assert server_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_the_hook_is_installed_once() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    assert install() == 2  # httptools and h11, both installed with the `server` extra
    hooked = H11Protocol.connection_made
    assert install() == 2
    assert H11Protocol.connection_made is hooked  # not wrapped twice
