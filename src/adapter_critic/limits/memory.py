"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The counters in this process (no `[limits] url`): exact for one process; each worker process of several counts on
its own (docs/guides/limits.md). Every operation runs without an `await` in between, so it is atomic on the event
loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    """One limit a request is checked against: the counter, its limit, what admission adds (1 to a requests
    counter, nothing to a tokens or cost one) and how long the counter lives (its window's rest, and a margin)."""

    key: str
    limit: float
    add: float
    ttl: int


# The refused check's index (None: admitted, and every `add` made) and every counter's value afterwards.
Admitted = tuple[int | None, list[float]]


class MemoryCounters:
    """Counters in a dict, each dropped once its window is over."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._values: dict[str, tuple[float, float]] = {}  # key -> (value, expires at)
        self._next_sweep = 0.0

    async def admit(self, checks: Sequence[Check]) -> Admitted:
        now = self._clock()
        self._sweep(now)
        values = [self._get(check.key, now) for check in checks]
        refused = next((i for i, check in enumerate(checks) if values[i] >= check.limit), None)
        if refused is None:
            for i, check in enumerate(checks):
                if check.add:
                    values[i] += check.add
                    self._values[check.key] = (values[i], now + check.ttl)
        return refused, values

    async def charge(self, amounts: Sequence[tuple[str, float, int]]) -> None:
        now = self._clock()
        for key, amount, ttl in amounts:
            self._values[key] = (self._get(key, now) + amount, now + ttl)

    async def read(self, keys: Sequence[str]) -> list[float]:
        now = self._clock()
        return [self._get(key, now) for key in keys]

    async def aclose(self) -> None:
        pass

    def _get(self, key: str, now: float) -> float:
        found = self._values.get(key)
        return found[0] if found is not None and found[1] > now else 0.0

    def _sweep(self, now: float) -> None:
        if now >= self._next_sweep:
            self._next_sweep = now + 60
            self._values = {k: v for k, v in self._values.items() if v[1] > now}
