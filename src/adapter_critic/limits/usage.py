"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A named key's usage as `GET /v1/keys/{name}/usage` and `adapter-critic keys usage NAME` show it: the runs it started
today and this month (UTC) from the run store, and the current windows of its limits from the counters."""

from __future__ import annotations

from typing import Protocol

import msgspec

from .gate import LIMIT_FIELDS, Limits
from .windows import day_start, month_start


class Period(msgspec.Struct, kw_only=True):
    """The runs a key started in a period, their tokens and their known cost (`total_known`: runs still going count
    nothing yet), from the run store; without one, `cost` is its cost budget's counter (null: it has none)."""

    since: float  # Unix seconds
    requests: int | None = None  # null: no run store to count them in
    tokens: int | None = None
    cost: float | None = None


class Window(msgspec.Struct, kw_only=True):
    """One of the key's limits and its current window."""

    limit: str  # `requests_per_minute`, `tokens_per_minute`, `cost_per_day`, `cost_per_month`
    value: float
    used: float
    remaining: float
    reset_seconds: float


class KeyUsage(msgspec.Struct, kw_only=True):
    name: str
    today: Period
    month: Period
    windows: list[Window] = []
    object: str = "key.usage"


class RunCounts(Protocol):
    """The run store's count of a key's runs (`store.runstore.RunStore`)."""

    async def flush(self) -> None: ...
    async def key_usage(self, key_name: str, since: float) -> tuple[int, int, float | None]: ...


async def key_usage(name: str, now: float, store: RunCounts | None, limits: Limits | None) -> KeyUsage:
    """`name`'s usage at `now`; raises what the store or the counters raise."""
    today, month = Period(since=day_start(now)), Period(since=month_start(now))
    if store is not None:
        await store.flush()  # the runs answered so far count
        today.requests, today.tokens, today.cost = await store.key_usage(name, today.since)
        month.requests, month.tokens, month.cost = await store.key_usage(name, month.since)
    windows = []
    for state in await limits.usage(name) if limits is not None else []:
        if state.kind == "cost_day" and store is None:
            today.cost = state.used
        elif state.kind == "cost_month" and store is None:
            month.cost = state.used
        windows.append(
            Window(
                limit=LIMIT_FIELDS[state.kind],
                value=state.limit,
                used=state.used,
                remaining=state.remaining,
                reset_seconds=round(state.reset, 3),
            )
        )
    return KeyUsage(name=name, today=today, month=month, windows=windows)
