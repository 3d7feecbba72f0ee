"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The run store's reads (`RunReads`, which `database.Database` is): the runs API's pages, a run's detail, its stages
from an index on, a key's usage, seen by whom the caller may see (`visibility`)."""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .feedback_reads import feedback_counts, feedback_on
from .reads import detail, request_messages, run_end, stored_stages, summary, total_tokens
from .records import (
    EVERY_RUN,
    Feedback,
    RunDetail,
    RunPage,
    RunQuery,
    RunsOf,
    RunSummary,
    StoredStage,
    decode_cursor,
    encode_cursor,
)
from .routing import shadows_of
from .schema import feedback, runs, stages
from .visibility import hide_unseen, owned

_SUMMARY = [
    c for c in runs.c if c.name not in ("request", "intermediate", "answer", "from_stages", "record", "instance")
]


class RunReads:
    """The reads of one store's engine."""

    engine: AsyncEngine

    # -- reading ---------------------------------------------------------------------------------------------------
    async def list_runs(self, query: RunQuery, limit: int, cursor: str | None, seen_by: RunsOf = EVERY_RUN) -> RunPage:
        """A page of the runs `seen_by` sees that match `query`, newest first."""
        statement = select(*_SUMMARY)
        conditions = owned(seen_by)
        for name in ("served_model", "mode", "status", "request_id", "parent_run_id", "key_name"):
            value = getattr(query, name)
            if value is not None:
                conditions.append(runs.c[name] == value)
        if query.degraded is not None:
            conditions.append(runs.c.degraded == query.degraded)
        if query.since is not None:
            conditions.append(runs.c.started_at >= query.since)
        if query.until is not None:
            conditions.append(runs.c.started_at < query.until)
        if query.min_cost is not None:
            conditions.append(runs.c.cost_known >= query.min_cost)
        if query.cache_hit is not None:
            hit = runs.c.cached_from.is_not(None)
            conditions.append(hit if query.cache_hit else runs.c.cached_from.is_(None))
        if query.has_feedback is not None:
            given = runs.c.run_id.in_(select(feedback.c.run_id))
            conditions.append(given if query.has_feedback else ~given)
        if cursor is not None:
            started_at, run_id = decode_cursor(cursor)
            conditions.append(
                or_(runs.c.started_at < started_at, and_(runs.c.started_at == started_at, runs.c.run_id < run_id))
            )
        statement = statement.where(*conditions).order_by(runs.c.started_at.desc(), runs.c.run_id.desc())
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement.limit(limit + 1))).mappings().all()
            page = [summary(row) for row in rows[:limit]]
            await hide_unseen(conn, seen_by, page)
            counts = await feedback_counts(conn, [run.id for run in page])
        for run in page:
            run.feedback_count = counts.get(run.id, 0)
        more = len(rows) > limit
        next_cursor = encode_cursor(rows[limit - 1]["started_at"], rows[limit - 1]["run_id"]) if more else None
        return RunPage(data=page, next_cursor=next_cursor, has_more=more)

    async def get_run(self, run_id: str, seen_by: RunsOf = EVERY_RUN) -> RunDetail | None:
        """The run's whole record, its stages and child runs; None when there is none `seen_by` sees."""
        async with self.engine.connect() as conn:
            found = select(runs).where(runs.c.run_id == run_id, *owned(seen_by))
            row = (await conn.execute(found)).mappings().first()
            if row is None:
                return None
            stage_rows = (
                (await conn.execute(select(stages).where(stages.c.run_id == run_id).order_by(stages.c.idx)))
                .mappings()
                .all()
            )
            children = (
                select(*_SUMMARY)
                .where(runs.c.parent_run_id == run_id, *owned(seen_by))
                .order_by(runs.c.started_at, runs.c.run_id)
            )
            child_rows = (await conn.execute(children)).mappings().all()
            run = detail(row, stage_rows, child_rows)
            await hide_unseen(conn, seen_by, [run, *run.children], run.stages)
            run.feedback = await feedback_on(conn, run_id)
            run.feedback_count = len(run.feedback)
            run.shadows = await shadows_of(conn, run_id)  # the live run's tenancy is theirs
        return run

    async def feedback_of(self, run_id: str) -> list[Feedback]:
        """The run's feedback entries, oldest first."""
        async with self.engine.connect() as conn:
            return await feedback_on(conn, run_id)

    async def get_summary(self, run_id: str, seen_by: RunsOf = EVERY_RUN) -> RunSummary | None:
        """The run as a list shows it; None when there is none `seen_by` sees."""
        async with self.engine.connect() as conn:
            found = select(*_SUMMARY).where(runs.c.run_id == run_id, *owned(seen_by))
            row = (await conn.execute(found)).mappings().first()
            run = None if row is None else summary(row)
            if run is not None:
                await hide_unseen(conn, seen_by, [run])
        return run

    async def stages_from(self, run_id: str, index: int, seen_by: RunsOf = EVERY_RUN) -> list[StoredStage]:
        """The run's finished stages from `index` on, in order (their child runs `seen_by` sees)."""
        statement = select(stages).where(stages.c.run_id == run_id, stages.c.idx >= index).order_by(stages.c.idx)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement)).mappings().all()
            run = (await conn.execute(select(runs.c.request, runs.c.record).where(runs.c.run_id == run_id))).first()
        if run is None:
            return []
        end = run_end(run.record)
        needed = any(row["request_messages"] for row in rows) or (end is not None and end.request_messages)
        found = stored_stages(rows, request_messages(run.request) if needed else None, end, index)
        if not seen_by.every and any(stage.child_run_id is not None for stage in found):
            async with self.engine.connect() as conn:
                await hide_unseen(conn, seen_by, (), found)
        return found

    async def key_usage(self, key_name: str, since: float) -> tuple[int, int, float | None]:
        """The runs a named key started since `since` (Unix seconds), their tokens and their known cost (the runs
        ended so far; cost None: no run had one). Only its requests' own runs count: a child run's tokens and cost
        are in its parent's already, and a shadow's (docs/guides/routing.md) are the operator's."""
        statement = select(runs.c.usage, runs.c.cost_known).where(
            runs.c.key_name == key_name, runs.c.started_at >= since, runs.c.parent_run_id.is_(None)
        )
        requests = tokens = 0
        cost: float | None = None
        async with self.engine.connect() as conn:
            async for row in await conn.stream(statement):
                requests += 1
                tokens += total_tokens(row.usage)
                if row.cost_known is not None:
                    cost = (cost or 0.0) + row.cost_known
        return requests, tokens, None if cost is None else round(cost, 10)

    async def count(self) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(runs))).scalar() or 0)
