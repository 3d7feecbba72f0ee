"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The counters in Redis (`[limits] url`), so every instance that shares it enforces one limit. A request's checks
and its additions are one Lua script, run atomically by Redis: two instances never both take a window's last
request. Charges are `INCRBYFLOAT`s in one transaction. Needs the `redis` extra (its asyncio client)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..redisclient import redis_client
from .memory import Admitted, Check

# KEYS: the counters; ARGV: limit, add, ttl for each. Reads every counter; when none is at its limit, adds.
# Values go back as strings: Redis turns a Lua number into an integer.
_ADMIT = """
local values = {}
local refused = 0
for i = 1, #KEYS do
  values[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  if refused == 0 and values[i] >= tonumber(ARGV[3 * i - 2]) then refused = i end
end
if refused == 0 then
  for i = 1, #KEYS do
    local add = tonumber(ARGV[3 * i - 1])
    if add > 0 then
      values[i] = tonumber(redis.call('INCRBYFLOAT', KEYS[i], add))
      redis.call('EXPIRE', KEYS[i], ARGV[3 * i])
    end
  end
end
local out = {tostring(refused)}
for i = 1, #KEYS do out[i + 1] = tostring(values[i]) end
return out
"""


class RedisCounters:
    """Counters in one Redis (not a cluster: a request's counters are touched by one script)."""

    def __init__(self, url: str, *, timeout: float = 2.0) -> None:
        self._redis: Any = redis_client(url, setting="limits.url", timeout=timeout)
        self._admit: Any = self._redis.register_script(_ADMIT)

    async def admit(self, checks: Sequence[Check]) -> Admitted:
        args: list[Any] = []
        for check in checks:
            args += [repr(check.limit), repr(check.add), check.ttl]
        out = await self._admit(keys=[check.key for check in checks], args=args)
        refused = int(out[0])
        return (refused - 1 if refused else None), [float(v) for v in out[1:]]

    async def charge(self, amounts: Sequence[tuple[str, float, int]]) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            for key, amount, ttl in amounts:
                pipe.incrbyfloat(key, amount)
                pipe.expire(key, ttl)
            await pipe.execute()

    async def read(self, keys: Sequence[str]) -> list[float]:
        if not keys:
            return []
        return [float(v or 0) for v in await self._redis.mget(list(keys))]

    async def aclose(self) -> None:
        await self._redis.aclose()
