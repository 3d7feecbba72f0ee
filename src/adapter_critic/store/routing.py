"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Choosing per request in the run store (docs/guides/routing.md): an `auto` model's policies in `route_policies`
(numbered; the newest is in use), and the shadow evaluations of live runs in `shadows`, with what each side took.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .records import RunsOf, ShadowDetail, ShadowRow
from .schema import feedback, route_policies, runs, shadows
from .transactions import writing
from .visibility import owned

_detail = msgspec.json.Decoder(ShadowDetail)


async def save_policy(engine: AsyncEngine, served_model: str, created_at: float, render: Callable[[int], str]) -> int:
    """Store a policy of `served_model` as its next version, `render`ed (as JSON) with its number; returns that."""
    async with writing(engine).begin() as conn:
        found = await conn.execute(
            select(func.max(route_policies.c.version)).where(route_policies.c.served_model == served_model)
        )
        version = int(found.scalar() or 0) + 1
        await conn.execute(
            insert(route_policies).values(
                served_model=served_model, version=version, created_at=created_at, policy=render(version)
            )
        )
    return version


async def latest_policy(engine: AsyncEngine, served_model: str, newer_than: int = 0) -> str | None:
    """The newest policy of `served_model` (its JSON), if its version is above `newer_than` (else None)."""
    statement = (
        select(route_policies.c.policy)
        .where(route_policies.c.served_model == served_model, route_policies.c.version > newer_than)
        .order_by(route_policies.c.version.desc())
        .limit(1)
    )
    async with engine.connect() as conn:
        text = (await conn.execute(statement)).scalar()
    return None if text is None else str(text)


async def add_shadow(engine: AsyncEngine, row: ShadowRow) -> None:
    async with writing(engine).begin() as conn:
        values = msgspec.structs.asdict(row)
        values["detail"] = msgspec.json.encode(row.detail).decode()
        await conn.execute(insert(shadows).values(**values))


async def shadow_rows(
    engine: AsyncEngine,
    *,
    served_model: str | None = None,
    since: float | None = None,
    seen_by: RunsOf | None = None,
) -> list[ShadowRow]:
    """The shadow evaluations of `served_model` (every one when None), oldest first; only those of the live runs
    `seen_by` may see when given (a shadow's key name is its live run's)."""
    statement: Any = select(shadows).order_by(shadows.c.created_at)
    if served_model is not None:
        statement = statement.where(shadows.c.served_model == served_model)
    if since is not None:
        statement = statement.where(shadows.c.created_at >= since)
    if seen_by is not None:
        statement = statement.where(*owned(seen_by, shadows.c.key_name))
    async with engine.connect() as conn:
        found = (await conn.execute(statement)).mappings().all()
    return [_row(row) for row in found]


async def shadows_of(conn: AsyncConnection, live_run_id: str) -> list[ShadowRow]:
    """The shadow evaluations of one live run, oldest first."""
    statement = select(shadows).where(shadows.c.live_run_id == live_run_id).order_by(shadows.c.created_at)
    return [_row(row) for row in (await conn.execute(statement)).mappings().all()]


def _row(row: Any) -> ShadowRow:
    return ShadowRow(**{**row, "detail": _detail.decode(row["detail"])})


class Scored(msgspec.Struct, kw_only=True):
    """A feedback entry's score on a run of one model, with what the run was asked and took."""

    served_model: str
    score: float  # -1 to 1, as given
    request: str | None  # JSON: StoredRequest (its messages under capture `full`)
    usage: str | None  # JSON: Tokens
    cost: float | None


async def scored_runs(engine: AsyncEngine, models: Sequence[str]) -> list[Scored]:
    """Every feedback entry on a run of one of `models` (a top-level run or a child run, a shadow's included)."""
    statement = (
        select(runs.c.served_model, feedback.c.score, runs.c.request, runs.c.usage, runs.c.cost_known)
        .join(runs, runs.c.run_id == feedback.c.run_id)
        .where(runs.c.served_model.in_(list(models)), feedback.c.stage.is_(None))
    )
    async with engine.connect() as conn:
        found = (await conn.execute(statement)).all()
    return [Scored(served_model=r[0], score=r[1], request=r[2], usage=r[3], cost=r[4]) for r in found]


async def requests_of(engine: AsyncEngine, run_ids: Sequence[str]) -> dict[str, str]:
    """The stored requests (JSON: StoredRequest) of the runs `run_ids` that have one."""
    if not run_ids:
        return {}
    statement = select(runs.c.run_id, runs.c.request).where(
        runs.c.run_id.in_(list(run_ids)), runs.c.request.is_not(None)
    )
    async with engine.connect() as conn:
        return {row[0]: row[1] for row in (await conn.execute(statement)).all()}
