"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Retries with backoff, and fallback targets, around one stage's upstream call.

A stage call is made on its target and retried on the failures that say "try again": a connection error, a
timeout, HTTP 429/500/502/503/504, or a 2xx answer that is not a chat completion (truncated JSON, an HTML page,
no choices, the wrong content type — what a cut connection or a proxy in front of the model produces). Up to the
target's `retries` (default: the top-level `retries`), waiting between attempts an exponential backoff with jitter,
or the upstream's `Retry-After` when it is no longer than `retry_backoff_max_seconds`; a longer `Retry-After` is not
waited for. Then each of the target's `fallbacks`, in order, the same way. Any other 4xx ends the call at once: the
request itself is wrong, and another attempt or target would say the same.

No library: tenacity or stamina would need adapters for `Retry-After`, per-target attempt counts, fallbacks and
streaming's "only while nothing was relayed" — which is most of this module.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ..core import StageTarget
from ..errors import UpstreamError

logger = logging.getLogger("adapter_critic")

_T = TypeVar("_T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The server-wide retry settings; a target's own `retries` wins over `retries` here.

    `sleep` waits between attempts (tests pass one that records the waits instead of sleeping them)."""

    retries: int = 2
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 5.0
    sleep: Sleep = anyio.sleep

    def attempts(self, target: StageTarget) -> int:
        return 1 + (self.retries if target.retries is None else target.retries)

    def ceiling(self, retry: int) -> float:
        """The longest backoff before retry number `retry` (1-based)."""
        return min(self.backoff_max_seconds, self.backoff_seconds * 2.0 ** (retry - 1))

    def delay(self, retry: int, error: UpstreamError) -> float | None:
        """Seconds to wait before retry number `retry` (1-based); None if the upstream asks for more than the cap."""
        if error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.backoff_max_seconds else None
        ceiling = self.ceiling(retry)
        return random.uniform(ceiling / 2, ceiling)  # jitter: clients failed together don't retry together


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` (OpenAI's), else `Retry-After` (seconds or an HTTP date); None if absent/bad."""
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        if value.strip().replace(".", "", 1).isdigit():
            return float(value)
        when = email.utils.parsedate_to_datetime(value)
    except (ValueError, TypeError):
        return None
    return max(0.0, when.timestamp() - time.time())


def reason(error: UpstreamError) -> str:
    """A failed attempt in a few words, for the log line that already names the stage and target."""
    if error.kind == "status":
        return f"HTTP {error.upstream_status}"
    return "timeout" if error.kind == "timeout" else error.detail.rstrip(".")


async def call_with_retries(
    stage: str,
    target: StageTarget,
    attempt: Callable[[StageTarget], Awaitable[_T]],
    policy: RetryPolicy,
    *,
    may_retry: Callable[[], bool] = lambda: True,
) -> tuple[_T, StageTarget]:
    """`attempt(target)`, retried and then fallen back as the module docstring says; returns its result and the
    target that gave it. `may_retry()` False makes the current failure final (a stream already relayed in part).

    A final 429 says when to come back (`Retry-After`): the upstream's last value, else this server's own
    estimate — the backoff it would have waited next.
    """
    candidates = (target, *target.fallbacks)
    made = 0
    last: UpstreamError | None = None
    for index, candidate in enumerate(candidates):
        attempts = policy.attempts(candidate)
        for number in range(1, attempts + 1):
            made += 1
            try:
                return await attempt(candidate), candidate
            except UpstreamError as exc:
                error = last = exc
            if not error.retryable or not may_retry():
                raise _settle(error, made, policy)
            delay = policy.delay(number, error) if number < attempts else None
            if delay is None:
                break
            logger.warning(
                "%s stage: attempt %d of %d on %s failed (%s); retrying in %.2f s",
                *(stage, number, attempts, candidate.label, reason(error), delay),
            )
            await policy.sleep(delay)
        if last is not None and index + 1 < len(candidates):
            following = candidates[index + 1].label
            logger.warning(
                "%s stage: %s failed (%s); falling back to %s", stage, candidate.label, reason(last), following
            )
    assert last is not None
    raise _settle(last, made, policy)


def _settle(error: UpstreamError, made: int, policy: RetryPolicy) -> UpstreamError:
    """The error the stage ends with: a 429 always carries a `Retry-After`, so the client knows when to
    come back."""
    if error.upstream_status != 429 or error.retry_after is not None:
        return error
    return error.evolve(retry_after=policy.ceiling(made))
