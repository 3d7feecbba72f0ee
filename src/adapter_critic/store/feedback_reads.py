"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Reading feedback entries (`store.feedback`) back: a run's, and how many each run of a page has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from .records import Feedback, iso
from .schema import feedback


def entry(row: Mapping[Any, Any]) -> Feedback:
    """A row of `feedback` as the API shows it."""
    return Feedback(
        id=row["feedback_id"],
        run_id=row["run_id"],
        created_at=iso(row["created_at"]),
        score=row["score"],
        label=row["label"],
        comment=row["comment"],
        stage=row["stage"],
        stage_index=row["stage_index"],
        verdict=row["verdict"],
        corrected_answer=row["corrected_answer"],
        key_name=row["key_name"],
        via=row["via"],
    )


async def feedback_on(conn: AsyncConnection, run_id: str) -> list[Feedback]:
    """The run's feedback entries, oldest first."""
    statement = select(feedback).where(feedback.c.run_id == run_id)
    rows = (await conn.execute(statement.order_by(feedback.c.created_at, feedback.c.feedback_id))).mappings().all()
    return [entry(row) for row in rows]


async def feedback_counts(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, int]:
    """How many feedback entries each of `run_ids` has (those with none are left out)."""
    if not run_ids:
        return {}
    statement = (
        select(feedback.c.run_id, func.count()).where(feedback.c.run_id.in_(list(run_ids))).group_by(feedback.c.run_id)
    )
    return {row[0]: int(row[1]) for row in (await conn.execute(statement)).all()}
