"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Run and response ids (`chatcmpl-…`, `msg_…`, `resp_…`): unique, unguessable, and in creation order.

An id's 32 hex digits are the creation time in milliseconds (12 digits) and 80 random bits. Ids made later sort
later, so a run store's indexes keyed by them grow at their end: a batch of runs touches a few index pages instead
of one page per run, which made recording a run to SQLite cost about half as much (`benchmarks/store.py`).
"""

from __future__ import annotations

import os
import time


def new_id(prefix: str) -> str:
    """`prefix` and 32 hex digits: the time in milliseconds, then 80 random bits."""
    return f"{prefix}{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"
