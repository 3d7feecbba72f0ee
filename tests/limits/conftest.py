"""Limits fixtures: the app served by real uvicorn in this process, so a test can move its clock (the throw-away
Redis, `redis_url`, is tests/conftest.py's: the cache's tests use it too)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from ..conftest import listening_socket


class Clock:
    """The limits' clock, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """`app` served by real uvicorn in a thread of this process; yields its base URL."""
    sock = listening_socket()  # listening already: clients may connect before uvicorn accepts
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
