"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The windows counters are kept in: fixed windows of `window_seconds` (requests, tokens) numbered from the epoch, the
UTC day and the UTC calendar month (cost). Fixed windows need one counter each, updated in one step, wherever it
lives; every instance numbers them the same from its clock."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Literal

Kind = Literal["requests", "tokens", "cost_day", "cost_month"]


@dataclass(frozen=True, slots=True)
class Window:
    """One counter's window: its id (part of the counter's name) and the seconds until it ends."""

    id: str
    reset: float


def window(kind: Kind, now: float, seconds: float) -> Window:
    """The window of `kind` that `now` (Unix seconds) lies in."""
    if kind in ("requests", "tokens"):
        index = math.floor(now / seconds)
        return Window(str(index), (index + 1) * seconds - now)
    day = datetime.datetime.fromtimestamp(now, datetime.UTC)
    if kind == "cost_day":
        start = day.replace(hour=0, minute=0, second=0, microsecond=0)
        return Window(start.strftime("%Y%m%d"), (start + datetime.timedelta(days=1)).timestamp() - now)
    start = day.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (
        start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    )
    return Window(start.strftime("%Y%m"), following.timestamp() - now)


def retry_after(seconds: float) -> str:
    """`Retry-After`: whole seconds, rounded up (a client that waits that long finds the window over)."""
    return str(max(1, math.ceil(seconds)))


def reset_text(seconds: float) -> str:
    """A time until a reset as OpenAI's `x-ratelimit-reset-*` headers give it: `6m0s`, `1.5s`, `20ms`."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    whole = f"{rest:.3f}".rstrip("0").rstrip(".")
    if minutes >= 60:
        hours, minutes = divmod(minutes, 60)
        return f"{int(hours)}h{int(minutes)}m{whole}s"
    return f"{int(minutes)}m{whole}s" if minutes else f"{whole}s"


def day_start(now: float) -> float:
    """The start of `now`'s UTC day (Unix seconds)."""
    return now + window("cost_day", now, 1).reset - 86400


def month_start(now: float) -> float:
    """The start of `now`'s UTC calendar month (Unix seconds)."""
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
