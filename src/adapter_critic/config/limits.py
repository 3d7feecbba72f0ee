"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Named inbound keys (`[[auth.keys]]`), their limits and the served models' (`[served_models.x.limits]`), and where the
counters live (`[limits]`): docs/guides/limits.md."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Budget = Annotated[float, msgspec.Meta(ge=0)]
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class RateLimits(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Limits on one caller (`[[auth.keys]]`) or on one served model, all its callers together."""

    requests_per_minute: PositiveInt | None = None
    """Runs started per window (`[limits] window_seconds`, a minute by default); one more is answered 429."""
    tokens_per_minute: PositiveInt | None = None
    """Tokens (prompt and completion, every stage) per window; a run is counted when it ends, so a window may
    go over by the tokens of the runs admitted while it still had room."""
    cost_per_day: Budget | None = None
    """The known cost (in `[pricing]`'s currency) of the runs that ended this UTC day; reached, new runs are
    answered 429 until midnight UTC. Needs `[prices]`."""
    cost_per_month: Budget | None = None
    """The known cost of the runs that ended this UTC calendar month; reached, new runs are answered 429 until the
    1st. Needs `[prices]`."""

    @property
    def any(self) -> bool:
        """Some limit is set."""
        return any(v is not None for v in msgspec.structs.astuple(self))

    @property
    def budgeted(self) -> bool:
        """A cost budget is set (it needs prices)."""
        return self.cost_per_day is not None or self.cost_per_month is not None


class AuthKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One named inbound key: who a caller is, what it may use and how much. The key itself is never in the config:
    give the env var that holds it (`key_env`) or its SHA-256 hash (`key_sha256`)."""

    name: Annotated[str, msgspec.Meta(pattern=_NAME)]
    """The caller's name: in the run store (`runs list --key`), the usage endpoint and the logs — never the key."""
    key_env: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """The env var holding this key (read on every request, so it rotates without a restart)."""
    key_sha256: str | None = None
    """The key's SHA-256 as 64 lowercase hex digits (`printf %s "$KEY" | sha256sum`), instead of `key_env`."""
    models: list[str] | None = None
    """The served models this key may use (`fnmatch` globs: `"team-*"`); another is answered 404 as unknown.
    Not set: every served model."""
    allow_overrides: bool = True
    """May send `x_adapter_critic` overrides (as far as the server's `allow_overrides` lets anyone). With `models`,
    an override may only name targets (model and URL) that one of this key's served models has: anything else is
    403, and nothing is sent upstream."""
    admin: bool = False
    """May read every key's usage (`GET /v1/keys/{name}/usage`) and every key's runs (the runs API); any key may read
    its own."""
    limits: RateLimits = RateLimits()
    """This key's own limits."""

    def __post_init__(self) -> None:
        if (self.key_env is None) == (self.key_sha256 is None):
            raise ValueError(f"auth.keys {self.name!r}: give exactly one of `key_env` and `key_sha256`")
        for pattern in self.models or ():
            problem = glob_problem(pattern)
            if problem is not None:
                raise ValueError(f"auth.keys {self.name!r}: models: {pattern!r} {problem}")
        if self.key_sha256 is not None and not _SHA256.fullmatch(self.key_sha256):
            raise ValueError(f"auth.keys {self.name!r}: key_sha256 must be 64 lowercase hex digits (a SHA-256)")


def glob_problem(pattern: str) -> str | None:
    """Why an `fnmatch` glob of a key's `models` can never match a model name, or None: empty, or a `[` set that is
    never closed (fnmatch then reads it as a literal `[`, which no model name has)."""
    if not pattern:
        return "is empty"
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                return "opens a `[` set that is never closed, so it matches no model"
            i = end
        i += 1
    return None


class AuthConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Inbound auth with named keys; may stand beside `auth_api_keys_env`, whose keys are nameless and unlimited."""

    keys: list[AuthKey] = []
    """The named keys, as `[[auth.keys]]` tables."""

    def __post_init__(self) -> None:
        names = [key.name for key in self.keys]
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate is not None:
            raise ValueError(f"auth.keys: the name {duplicate!r} is given twice")


class LimitsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Where the limits' counters live, and what happens when that place cannot be reached."""

    url: Annotated[str, msgspec.Meta(pattern=r"^rediss?://")] | None = None
    """`redis://host:port/db` (needs the `redis` extra): every instance sharing it enforces one limit. Not set: the
    counters are in the process, so each worker process enforces the limits on its own."""
    on_error: Literal["open", "closed"] = "open"
    """When the Redis at `url` fails: `"open"` admits the request uncounted, `"closed"` answers 503. Either way it
    is logged and counted (`adapter_critic_limits_errors_total`)."""
    window_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    """The length of the requests and tokens windows (`requests_per_minute` counts per window)."""
    reserve_tokens: PositiveInt | None = None
    """What a cost budget holds back for a run when it is admitted, per stage: its prompt (estimated) and this many
    completion tokens at the stage model's price, when the request sets no `max_tokens` (default 4096). The run's real
    cost replaces the reservation when it ends, so concurrent runs cannot spend past a budget by more than one run's
    reservation (while each costs no more than it reserved)."""
    key_prefix: Annotated[str, msgspec.Meta(min_length=1)] = "adapter_critic:limits"
    """The prefix of the counters' Redis keys (servers with different limits can share one Redis)."""
