"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A run's lessons (docs/guides/learning.md): a served model with `learning` gives its reviewers the lessons of its
active version, read from the run store as each run starts (or the version `lessons learn` pins while it checks a
new one). A store that cannot be read leaves the run without lessons, said in the log; it never fails the request.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core import Plan

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger("adapter_critic")


async def with_lessons(plan: Plan, engine: AsyncEngine, pinned: Mapping[str, int | None]) -> Plan:
    """`plan` with the lessons its served model's reviewers use now (unchanged when there are none)."""
    from ..store import lessons  # the store's extra: only a served model with `learning`, and a store, come here

    served_id = plan.served_id
    try:
        if served_id in pinned:
            number = pinned[served_id]
            found = None if number is None else await lessons.version(engine, served_id, number)
        else:
            found = await lessons.active(engine, served_id)
    except Exception as exc:  # the database driver's own errors: the run goes on without lessons
        logger.warning("%s: running without lessons: the run store could not be read (%s)", served_id, exc)
        return plan
    if found is None or not found.lessons:
        return plan
    return dataclasses.replace(plan, lessons=tuple(found.lessons), lessons_version=found.version)
