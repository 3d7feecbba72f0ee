"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The exact-match cache (docs/guides/cache.md): which requests may be answered from it and their key (`key`), what is
kept of a run and how it is answered again (`entry`), where it is kept — the run store's database or a Redis
(`backends`) — the cache a service asks (`answers`), and a hit as a run of its own (`hit`). Its config is `[cache]`
(`config.cache`) and a served model's `cache`, `cache_ttl_seconds`.
"""
