"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Whose runs a read returns (`records.RunsOf`): the SQL condition that keeps a reader to its own runs, and the links
to other runs — a child run's parent, a run's child runs, a cache hit's source — made null when they name a run the
reader may not see, so that no read tells even the id of another key's run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncConnection

from .records import RunsOf, RunSummary, StoredStage
from .schema import runs


def owned(seen_by: RunsOf, column: Any = runs.c.key_name) -> list[ColumnElement[bool]]:
    """The conditions on `runs` for the runs `seen_by` sees (none: every run); on another table's key-name
    `column`, for its rows that belong to those runs."""
    if seen_by.every:
        return []
    return [column.is_(None) if seen_by.key_name is None else column == seen_by.key_name]


async def hide_unseen(
    conn: AsyncConnection,
    seen_by: RunsOf,
    found: Iterable[RunSummary],
    stages: Sequence[StoredStage] = (),
) -> None:
    """Null, in place, each link of `found` (their parents, the runs they answered from) and of `stages` (their
    child runs) to a run that `seen_by` may not see: one query, and only when there are links to check."""
    if seen_by.every:
        return
    found = list(found)
    linked = {run_id for run in found for run_id in (run.parent_run_id, run.cached_from) if run_id is not None}
    linked.update(stage.child_run_id for stage in stages if stage.child_run_id is not None)
    if not linked:
        return
    statement: Any = select(runs.c.run_id).where(runs.c.run_id.in_(sorted(linked)), *owned(seen_by))
    visible = set((await conn.execute(statement)).scalars().all())
    for run in found:
        if run.parent_run_id is not None and run.parent_run_id not in visible:
            run.parent_run_id = run.parent_stage = None
        if run.cached_from is not None and run.cached_from not in visible:
            run.cached_from = None
    for stage in stages:
        if stage.child_run_id is not None and stage.child_run_id not in visible:
            stage.child_run_id = None
