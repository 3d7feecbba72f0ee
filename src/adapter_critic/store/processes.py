"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Which process is which, from /proc: a store's instance is gone when its process is (`Database.mark_interrupted`),
and the workers of one server name their metrics directory after their supervisor's start (`observe.workers`).
"""

from __future__ import annotations

import os


def process_identity(pid: int) -> str | None:
    """`<pid namespace>/<start time>` of process `pid` (its start in clock ticks since boot), from /proc; None
    where /proc does not say (another system, another user's process)."""
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    started = start_time(pid)
    return None if started is None else f"{namespace}/{started}"


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, from /proc), or None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def process_gone(pid: int, process: str | None) -> bool:
    """Whether the instance that registered as `pid` (`process`: its `process_identity`) on this host is gone: no
    such pid, or one started since (the pid reused). An instance in another pid namespace — another container that
    shares this host's name, as `--network host` does — cannot be looked up here: it is not gone by this test."""
    if process is None:
        return not pid_alive(pid)
    namespace, _, started = process.rpartition("/")
    own = process_identity(os.getpid())
    if own is None or own.rpartition("/")[0] != namespace:
        return False
    return not pid_alive(pid) or start_time(pid) != started


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
