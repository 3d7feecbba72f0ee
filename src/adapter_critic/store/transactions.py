"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

How a transaction that writes is begun: on SQLite it takes the write lock at once (`BEGIN IMMEDIATE`, see
`store.database`), so that it never meets another connection's write between its reads and its writes (a deferred
transaction that read first fails then with "database is locked", whatever the busy timeout)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine


def writing(engine: AsyncEngine) -> AsyncEngine:
    """`engine` for a transaction that writes."""
    return engine.execution_options(writes=True)
