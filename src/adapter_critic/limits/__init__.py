"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Limits and budgets per caller and per served model (docs/guides/limits.md): which windows a request is counted in
(`windows`), where the counters live (this process: `memory`; a Redis: `shared`), the admission of a run and its
charge (`gate`), and a key's usage (`usage`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..config import Config
from ..events import RunRecord
from .gate import Counters, Limits, Ticket, known_cost
from .memory import MemoryCounters

__all__ = ["Limits", "Ticket", "limits_for"]


def limits_for(
    config: Config,
    *,
    clock: Callable[[], float] = time.time,
    run_cost: Callable[[RunRecord], float] = known_cost,
    on_refused: Callable[[str, str], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> Limits | None:
    """The service's limits, or None when no key or served model has a limit: then a request does no limit work at
    all (a key's `models` is `access.KeyPolicy`'s)."""
    keys = config.auth.keys
    if not any(k.limits.any for k in keys) and not any(served.limits.any for served in config.served_models.values()):
        return None
    if config.limits.url is not None:
        from .shared import RedisCounters

        counters: Counters = RedisCounters(config.limits.url)
    else:
        counters = MemoryCounters(clock)
    return Limits(config, counters, clock=clock, run_cost=run_cost, on_refused=on_refused, on_error=on_error)
