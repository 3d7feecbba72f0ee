"""Store fixtures: every store test runs on SQLite and on PostgreSQL (a throw-away server, see `pgserver`)."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from .pgserver import missing_reason, postgres_server

_databases = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the PostgreSQL store tests: {reason}")
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


async def _create_database(server: str, name: str) -> None:
    conn = await asyncpg.connect(f"{server}/postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store's URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    server: str = request.getfixturevalue("pg_server")
    name = f"runs_{os.getpid()}_{next(_databases)}"
    asyncio.run(_create_database(server, name))
    return f"{server}/{name}"
