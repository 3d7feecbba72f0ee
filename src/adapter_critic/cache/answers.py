"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`AnswerCache`: the exact-match cache a service asks (docs/guides/cache.md) — made only when a served model has
`cache = true`, so a server without one does no cache work at all.

A lookup reads the backend once. An answer is kept when its run ends `ok` (never degraded, failed, cancelled or
interrupted): handed to the backend without waiting, and held here until the backend says it is there, so a request
that follows at once is answered from it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..config import Config
from ..core import ChatRequest, Plan
from ..errors import ConfigError
from ..events import Event, RunFinished, Subscriber
from .entry import CachedRun, snapshot
from .key import cache_key, owner_of, plan_document, real_answer

if TYPE_CHECKING:
    from ..store.runstore import RunStore
    from .backends import Backend

logger = logging.getLogger("adapter_critic")

HEADER = "x-adapter-critic-cache"  # `hit` or `miss` on an answer a cache was asked for
MAX_PENDING = 10_000  # answers held until written; more (a store dropping records) are let go: later misses


class AnswerCache:
    """The cache of one service: its backend, each served model's time to live, and the answers being written."""

    def __init__(
        self,
        backend: Backend,
        ttls: dict[str, float],
        *,
        clock: Callable[[], float] = time.time,
        models: dict[tuple[str, str], float] | None = None,
        shared: bool = False,
    ) -> None:
        self.backend = backend
        self.ttls = ttls  # served model id -> seconds; a model not in it is never cached
        # (upstream model, base URL) of a cached served model's `api` -> its seconds: a prefixed name on that model
        # (`critic-<model>`, `[models]`) is cached as that served model is.
        self.models = models or {}
        self.shared = shared  # `[cache] scope = "shared"`: one scope for every named key
        self.clock = clock
        self.pending: dict[str, tuple[CachedRun, float]] = {}  # key -> (answer, expires at), until written
        # Served model id -> its plan and the plan's part of a key: a served model's plan is the same object from
        # request to request (unless overridden), and its document the most of what making a key costs.
        self._plans: dict[str, tuple[Plan, bytes]] = {}
        backend.written = self._written

    @property
    def keeps_in_store(self) -> bool:
        """Its answers are kept in the run store (no `[cache] url`)."""
        from .backends import StoreBackend

        return isinstance(self.backend, StoreBackend)

    def ttl(self, plan: Plan) -> float | None:
        """How long the plan's answers are kept: its served model's time (`cache = true`), or for a prefixed name the
        time of the cached served model whose upstream model it runs on; None: not cached."""
        found = self.ttls.get(plan.served_id)
        if found is None and self.models:
            found = self.models.get((plan.api.model, plan.api.base_url))
        return found

    def key(self, plan: Plan, request: ChatRequest, plan_of: Callable[[str], Plan], owner: str | None = None) -> str:
        """The request's key (`key.cache_key`); `plan_of` resolves the plans of the served models its stages run,
        `owner` is whose answers it may be given (`key.owner_of`)."""
        if plan.served_id not in self.ttls:  # a prefixed name: one of a set without end, never remembered
            return cache_key(plan_document(plan, plan_of), request, owner)
        known = self._plans.get(plan.served_id)
        if known is None or known[0] is not plan:
            known = self._plans[plan.served_id] = (plan, plan_document(plan, plan_of))
        return cache_key(known[1], request, owner)

    def owner(self, plan: Plan, caller: str | None, client_token: str | None) -> str | None:
        """Whose answers this request may be given (`key.owner_of`)."""
        return owner_of(plan, caller, client_token, self.shared)

    async def lookup(self, key: str) -> CachedRun | None:
        """The answer kept under `key`, if any and not expired; a backend that fails is a miss (logged)."""
        now = self.clock()
        held = self.pending.get(key)
        if held is not None and held[1] > now:
            return held[0]
        try:
            return await self.backend.get(key, now)
        except Exception as exc:
            logger.warning("cache: a lookup failed, answering without the cache (%s: %s)", type(exc).__name__, exc)
            return None

    def keeper(self, key: str, ttl: float, secret: str | None) -> Subscriber:
        """A run subscriber that keeps the run's answer under `key` for `ttl` seconds when the run ends `ok` with a
        real answer (`key.real_answer`: never a body the upstream meant as an error)."""

        def keep(event: Event) -> None:
            if type(event) is RunFinished and event.status == "ok":
                if not real_answer(event.record.answer):
                    return
                now = self.clock()
                entry = snapshot(event.record, created_at=now)
                expires = now + ttl
                if len(self.pending) >= MAX_PENDING:
                    self.pending.clear()
                self.pending[key] = (entry, expires)
                self.backend.put(key, entry, expires, secret)

        return keep

    def _written(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.pending.pop(key, None)

    async def aclose(self) -> None:
        await self.backend.aclose()


def cache_for(
    config: Config,
    store: RunStore | None,
    secrets: Callable[[], Sequence[str]],
    *,
    clock: Callable[[], float] = time.time,
) -> AnswerCache | None:
    """The service's cache, or None when no served model has `cache = true`. Without `[cache] url` its answers are
    kept in the run store: a cache without either is a `ConfigError`."""
    ttls = {
        served_id: served.cache_ttl_seconds or config.cache.ttl_seconds
        for served_id, served in config.served_models.items()
        if served.cache
    }
    if not ttls:
        return None
    backend: Backend
    if config.cache.url is not None:
        from .backends import RedisBackend

        backend = RedisBackend(config.cache.url, config.cache.key_prefix, secrets)
    elif store is not None:
        from .backends import StoreBackend

        backend = StoreBackend(store)
    else:
        raise ConfigError(
            f"served_models.{next(iter(ttls))}.cache: the cache keeps its answers in the run store, and this server "
            "records no runs; give store.url (or ADAPTER_CRITIC_STORE), or [cache] url (a Redis)"
        )
    models: dict[tuple[str, str], float] = {}
    if config.models.technique_prefixes:
        for served_id, ttl in ttls.items():
            api = config.served_models[served_id].api
            if api is not None:
                models.setdefault((api.model, api.url), ttl)
    return AnswerCache(backend, ttls, clock=clock, models=models, shared=config.cache.scope == "shared")
