"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Routing a request for an `auto` model (docs/guides/routing.md): its router's decision, and the plan that runs the
chosen candidate as its API stage, with the decision noted for the run's record. The policy each router uses is the
newest `route fit` stored, looked for in the run store every `refresh_seconds` (a store that cannot be read keeps
the policy in hand, said in the log; it never fails the request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import Config
from ..core import ChatRequest, Plan, StageTarget
from ..errors import RequestError
from ..request.overrides import Overrides
from ..routing.policy import decode_policy
from ..routing.router import Router

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger("adapter_critic")


class Routing:
    """The routers of a config's `auto` models."""

    def __init__(self, config: Config, *, on_route: Callable[[str, str, str], None] | None = None) -> None:
        self.routers = {i: Router(s.route) for i, s in config.served_models.items() if s.route is not None}
        self.on_route = on_route  # counts a decision (served model, candidate, by); None: metrics are off
        self._locks: dict[str, asyncio.Lock] = {}

    async def route(
        self, plan: Plan, request: ChatRequest, key: str | None, header: str | None, engine: AsyncEngine | None
    ) -> Plan:
        """`plan` of an `auto` model with the candidate its router chooses for this request as its API stage."""
        router = self.routers[plan.served_id]
        if engine is not None and time.monotonic() - router.checked_at >= router.route.refresh_seconds:
            async with self._locks.setdefault(plan.served_id, asyncio.Lock()):  # one read; the others wait for it
                if time.monotonic() - router.checked_at >= router.route.refresh_seconds:
                    await refresh(router, plan.served_id, engine)
        overrides = request.overrides
        effort = None if overrides is None else overrides.effort
        decision = router.decide(request, key, header, effort)
        if self.on_route is not None:
            self.on_route(plan.served_id, decision.candidate, decision.by)
        return dataclasses.replace(plan, api=StageTarget.of_served(decision.candidate), route=decision.note())


async def refresh(router: Router, served_id: str, engine: AsyncEngine) -> None:
    """Take the newest policy of `served_id` from the store when there is a newer one than the router's."""
    from ..store.routing import latest_policy  # the store's extra: only an `auto` model with a store comes here

    known = 0 if router.policy is None else router.policy.version
    try:
        found = await latest_policy(engine, served_id, known)
    except Exception as exc:  # the database driver's own errors
        logger.warning("%s: routing with the policy in hand: the run store could not be read (%s)", served_id, exc)
        found = None
    router.checked_at = time.monotonic()
    if found is not None:
        router.policy = decode_policy(found)


def refuse_effort(request: ChatRequest, served_id: str) -> None:
    """A 400 for `effort` on a model that is not `auto`."""
    overrides = request.overrides
    if overrides is not None and overrides.effort is not None:
        where = request.overrides_param
        raise RequestError(
            f"`{where}.effort` chooses among an auto model's candidates; {served_id!r} is not an auto model "
            '(mode = "auto").',
            param=f"{where}.effort",
        )


def passed_on(request: ChatRequest) -> Overrides | None:
    """The settings a request for an `auto` model gives the candidate that answers it (its `x_adapter_critic` but
    `effort`); a 400 for `mode` or a stage target, which only a candidate's own config may say."""
    overrides = request.overrides
    if overrides is None:
        return None
    where = request.overrides_param
    for name in overrides.given:
        if name == "mode" or name.endswith(("_model", "_base_url")):
            raise RequestError(
                f"`{where}.{name}`: an auto model chooses the candidate that answers, with its own workflow and "
                "targets; a request may give settings and `effort`, not a mode or a target.",
                param=f"{where}.{name}",
            )
    given = {name: value for name, value in overrides.given.items() if name != "effort"}
    return Overrides(**given) if given else None
