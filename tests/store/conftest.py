"""Store fixtures: every store test runs on SQLite and on PostgreSQL (a throw-away server, see `pgserver`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import unavailable
from .pgserver import execute, missing_reason, postgres_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    reason = missing_reason()
    if reason is not None:
        unavailable(reason)
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def pg_database(pg_server: str) -> str:
    """One database for every PostgreSQL test (emptied before each: creating one per test is slow)."""
    execute(f"{pg_server}/postgres", f'CREATE DATABASE "runs_{os.getpid()}"')
    return f"{pg_server}/runs_{os.getpid()}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store's URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    url: str = request.getfixturevalue("pg_database")
    execute(url, "DROP TABLE IF EXISTS runs, stages, instances, cache, feedback, lessons, schema_version")
    return url
