"""Retries with backoff, and fallback targets, around one stage's upstream call.

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
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ._exceptions import UpstreamError, UpstreamStatusError, UpstreamTimeout, UpstreamUnavailable
from ._resolve import StageTarget

logger = logging.getLogger("adapter_critic")

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})

_T = TypeVar("_T")

sleep = anyio.sleep  # module-level so tests can record the waits instead of sleeping them


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The server-wide retry settings; a target's own `retries` wins over `retries` here."""

    retries: int = 2
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 5.0

    def attempts(self, target: StageTarget) -> int:
        return 1 + (self.retries if target.retries is None else target.retries)

    def delay(self, retry: int, error: UpstreamError) -> float | None:
        """Seconds to wait before retry number `retry` (1-based); None if the upstream asks for more than the cap."""
        asked = error.retry_after_seconds if isinstance(error, UpstreamStatusError) else None
        if asked is not None:
            return asked if asked <= self.backoff_max_seconds else None
        ceiling = min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (retry - 1))
        return random.uniform(ceiling / 2, ceiling)  # jitter: clients failed together don't retry together


def retryable(error: UpstreamError) -> bool:
    if isinstance(error, UpstreamStatusError):
        return error.upstream_status in RETRYABLE_STATUSES
    return isinstance(error, UpstreamTimeout | UpstreamUnavailable)


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
    if isinstance(error, UpstreamStatusError):
        return f"HTTP {error.upstream_status}"
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    message = error.message
    if message.startswith(f"The {error.stage} stage's upstream ("):
        message = message.partition(") ")[2] or message  # the log line names the stage and target already
    return message


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

    The final error says `x-should-retry: false` (every upstream error does, §7) — except a 429 whose
    `Retry-After` the server did not wait out (see `_settle`).
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
            if not retryable(error) or not may_retry():
                raise _settle(error, made, policy)
            delay = policy.delay(number, error) if number < attempts else None
            if delay is None:
                break
            logger.warning(
                "%s stage: attempt %d of %d on %s failed (%s); retrying in %.2f s",
                *(stage, number, attempts, candidate.label, reason(error), delay),
            )
            await sleep(delay)
        if last is not None and index + 1 < len(candidates):
            following = candidates[index + 1].label
            logger.warning(
                "%s stage: %s failed (%s); falling back to %s", stage, candidate.label, reason(last), following
            )
    assert last is not None
    raise _settle(last, made, policy)


def _settle(error: UpstreamError, made: int, policy: RetryPolicy) -> UpstreamError:
    """Decide what a final 429 tells the client (the "no double retries" rule).

    A 429 keeps the upstream's `Retry-After` (and no `x-should-retry: false`, so the OpenAI SDKs wait and retry)
    only when waiting is worth it: the upstream asked for longer than this server waits (`retry_backoff_max_seconds`),
    or this server made no retries at all. Once the server has waited and retried, a client retry would re-run the
    whole workflow into the same limit: the 429 then says `x-should-retry: false` and drops `Retry-After`.
    """
    if not isinstance(error, UpstreamStatusError) or error.upstream_status != 429:
        return error
    asked = error.retry_after_seconds
    if asked is not None and asked > policy.backoff_max_seconds:
        error.headers.setdefault("retry-after", str(math.ceil(asked)))  # the upstream may have sent only `-ms`
        return error
    if made > 1:
        error.headers.pop("retry-after", None)
        error.headers["x-should-retry"] = "false"
    return error
