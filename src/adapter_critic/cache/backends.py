"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Where the exact-match cache keeps its answers: the run store's database (`StoreBackend`, the default) or a Redis
(`RedisBackend`, `[cache] url`). A lookup is one read: a row by its primary key, or one `GET`. Keeping an answer
never waits: the store's background writer writes it with its run's records; a Redis `SET` runs in a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..redisclient import redis_client
from ..store.cleaning import Cleaner
from ..store.recorder import CachePut, Record
from ..store.runstore import RunStore
from .entry import CachedRun, decoder

logger = logging.getLogger("adapter_critic")


class Backend(Protocol):
    """A place to keep answers: `get` reads one (None: none, or expired); `put` keeps one without waiting for it;
    `written` tells the cache which answers are there now (`AnswerCache` holds them until then)."""

    written: Callable[[Sequence[str]], None] | None

    async def get(self, key: str, now: float) -> CachedRun | None: ...
    def put(self, key: str, entry: CachedRun, expires_at: float, secret: str | None) -> None: ...
    async def aclose(self) -> None: ...


class StoreBackend:
    """Answers in the run store's `cache` table, written by its writer with the batch of the run that made them."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.written: Callable[[Sequence[str]], None] | None = None
        store.on_written = self._batch_written

    async def get(self, key: str, now: float) -> CachedRun | None:
        found = await self.store.database.cached(key, now)
        return None if found is None else decoder.decode(found)

    def put(self, key: str, entry: CachedRun, expires_at: float, secret: str | None) -> None:
        self.store.enqueue(CachePut(key, entry.run_id, entry.served_model, entry, entry.created_at, expires_at, secret))

    def _batch_written(self, batch: Sequence[Record]) -> None:
        if self.written is not None:
            keys = [record.key for record in batch if type(record) is CachePut]
            if keys:
                self.written(keys)

    async def aclose(self) -> None:
        pass  # the store is the handler's to close


class RedisBackend:
    """Answers in a Redis, each under `<key_prefix>:<key>` with its time to live (Redis drops it when that ends).
    Needs the `redis` extra (its asyncio client)."""

    def __init__(self, url: str, prefix: str, secrets: Callable[[], Sequence[str]], *, timeout: float = 2.0) -> None:
        self._redis: Any = redis_client(url, setting="cache.url", timeout=timeout)
        self._prefix = prefix
        self._secrets = secrets
        self._pending: set[asyncio.Task[None]] = set()
        self.written: Callable[[Sequence[str]], None] | None = None

    async def get(self, key: str, now: float) -> CachedRun | None:
        found = await self._redis.get(f"{self._prefix}:{key}")
        return None if found is None else decoder.decode(found)

    def put(self, key: str, entry: CachedRun, expires_at: float, secret: str | None) -> None:
        task = asyncio.get_running_loop().create_task(self._set(key, entry, expires_at, secret))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _set(self, key: str, entry: CachedRun, expires_at: float, secret: str | None) -> None:
        try:
            encoded = Cleaner(self._secrets()).for_secret(secret).json(entry)
            ttl_ms = max(1, int((expires_at - entry.created_at) * 1000))
            await self._redis.set(f"{self._prefix}:{key}", encoded, px=ttl_ms)
        except Exception as exc:
            logger.warning("cache: keeping an answer in Redis failed (%s: %s)", type(exc).__name__, exc)
        finally:
            if self.written is not None:
                self.written([key])

    async def aclose(self) -> None:
        """Let the answers being kept be written, then close the connection."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._redis.aclose()


__all__ = ["Backend", "RedisBackend", "StoreBackend"]
