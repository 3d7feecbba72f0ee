"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A Redis client as the server uses one — the limits' shared counters (`limits.shared`) and the cache's answers
(`cache.backends`): redis-py's asyncio client with short timeouts and no retries of its own, so a Redis that is down
is at once the caller's configured failure (a miss, `limits.on_error`), never a request that hangs. Needs the `redis`
extra.
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError


def redis_client(url: str, *, setting: str, timeout: float) -> Any:
    """A client of the Redis at `url`, named in the config as `setting` (said when the `redis` extra is missing)."""
    try:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
    except ImportError:
        raise ConfigError(
            f"{setting} names a Redis, but the `redis` package is not installed: pip install 'adapter_critic[redis]'"
        ) from None
    return Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry_on_timeout=False,
        retry=Retry(NoBackoff(), 0),
    )
