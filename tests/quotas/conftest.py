"""Limits fixtures: a real Redis (skipped with the reason when `redis-server` is missing, except under `CI=true`,
where the skip fails), and the app served by real uvicorn in this process, so a test can move its clock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from ..conftest import listening_socket, unavailable
from .redisserver import RedisServer, missing_reason, redis_server


@pytest.fixture
def redis_url() -> Iterator[RedisServer]:
    """A fresh Redis per test (a test may stop it)."""
    reason = missing_reason()
    if reason is not None:
        unavailable(reason)
    with redis_server() as server:
        yield server


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
