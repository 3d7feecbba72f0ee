"""A throw-away Redis for the limits tests, from the machine's own `redis-server`: started on a free loopback port in
a temporary directory, nothing persisted, removed afterwards (as `tests.store.pgserver` does for PostgreSQL)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def missing_reason() -> str | None:
    """Why no server can be started here, or None."""
    return None if shutil.which("redis-server") else "redis-server was not found on PATH"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One `redis-server` process; `stop()` ends it early (a Redis going down mid-run)."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="adapter-critic-redis-")
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.root, "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            ["redis-server", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.process.stdout is not None
        said = []
        for line in self.process.stdout:  # its log, until it says it listens (or it exits: the end of its log)
            said.append(line)
            if "ready to accept connections" in line.lower():
                break
        else:
            self.process.wait(timeout=10)
            raise RuntimeError(f"redis-server did not start: {''.join(said)[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()
