"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `[cache]` table of the config: where the exact-match cache (the `cache` package) keeps its answers
(docs/guides/cache.md). A served model turns the cache on for itself (`cache = true`, `cache_ttl_seconds`,
`config.served`)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

DAY = 86_400.0


class CacheConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Where the exact-match cache of the served models with `cache = true` keeps its answers."""

    url: Annotated[str, msgspec.Meta(pattern=r"^rediss?://")] | None = None
    """`redis://host:port/db` (needs the `redis` extra): answers are kept in that Redis, shared by every instance
    using it. Not set: in the run store's database (SQLite or PostgreSQL), which must then be on."""
    ttl_seconds: Annotated[float, msgspec.Meta(gt=0)] = DAY
    """How long a cached answer is served, for a served model that sets no `cache_ttl_seconds` of its own."""
    key_prefix: Annotated[str, msgspec.Meta(min_length=1)] = "adapter_critic:cache"
    """The prefix of the cached answers' Redis keys (servers with different configs can share one Redis)."""
    scope: Literal["key", "shared"] = "key"
    """Whose answers a request may be given. `"key"`: with named keys (`[[auth.keys]]`), a hit only for the key whose
    request stored it (the nameless keys of `auth_api_keys_env`, and a server without inbound auth, share one scope).
    `"shared"`: every caller's answers serve every caller — a hit then tells a caller that someone asked the same
    question before, what was answered, and the id of that run. A served model that forwards the caller's
    authorization is cached per caller credential either way."""
