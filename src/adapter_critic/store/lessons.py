"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Lessons for a served model's reviewers (docs/guides/learning.md), kept in the run store's `lessons` table: numbered
versions per served model, each a bounded list of short texts. A version is learnt as a `candidate`; it becomes
`active` (the one runs use) only when its eval says it is not worse, and the version active before is then
`retired`; one whose eval says it is worse is `rejected`. At most one version of a served model is active.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

import msgspec
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from .records import iso
from .schema import lessons
from .transactions import writing

Status = Literal["candidate", "active", "retired", "rejected"]
MAX_LESSONS = 32
MAX_LESSON_CHARS = 300


class LessonVersion(msgspec.Struct, kw_only=True):
    """One version of a served model's lessons, as `lessons show` and the runs API show it."""

    served_model: str
    version: int
    status: Status
    created_at: str
    lessons: list[str]
    parent: int | None = None
    note: dict[str, Any] | None = None  # what its eval found


def changes(version: LessonVersion, parent: LessonVersion | None) -> tuple[list[str], list[str]]:
    """What `version` added to the version it was learnt after, and what it dropped from it."""
    before = parent.lessons if parent is not None else []
    return [lesson for lesson in version.lessons if lesson not in before], [
        lesson for lesson in before if lesson not in version.lessons
    ]


def _version(row: Any) -> LessonVersion:
    return LessonVersion(
        served_model=row["served_model"],
        version=row["version"],
        status=row["status"],
        created_at=iso(row["created_at"]),
        lessons=json.loads(row["lessons"]),
        parent=row["parent"],
        note=json.loads(row["note"]) if row["note"] else None,
    )


def bounded(found: list[str], most: int) -> list[str]:
    """Lessons as kept: stripped, each at most `MAX_LESSON_CHARS` characters, no two alike, at most `most`."""
    kept: list[str] = []
    for lesson in found:
        text = " ".join(lesson.split())[:MAX_LESSON_CHARS]
        if text and text.lower() not in (k.lower() for k in kept):
            kept.append(text)
    return kept[: min(most, MAX_LESSONS)]


async def add(engine: AsyncEngine, served_model: str, found: list[str], parent: int | None) -> LessonVersion:
    """A new candidate version (the next number) of `served_model`'s lessons."""
    async with writing(engine).begin() as conn:
        last = (
            await conn.execute(select(func.max(lessons.c.version)).where(lessons.c.served_model == served_model))
        ).scalar()
        version = (last or 0) + 1
        values = {"served_model": served_model, "version": version, "status": "candidate", "created_at": time.time(),
                  "lessons": json.dumps(found, ensure_ascii=False), "parent": parent, "note": None}  # fmt: skip
        await conn.execute(lessons.insert().values(**values))
    return _version(values)


async def versions(engine: AsyncEngine, served_model: str) -> list[LessonVersion]:
    """Every version of `served_model`'s lessons, the newest first."""
    async with engine.connect() as conn:
        statement = select(lessons).where(lessons.c.served_model == served_model).order_by(lessons.c.version.desc())
        return [_version(row) for row in (await conn.execute(statement)).mappings().all()]


async def version(engine: AsyncEngine, served_model: str, number: int) -> LessonVersion | None:
    async with engine.connect() as conn:
        statement = select(lessons).where(lessons.c.served_model == served_model, lessons.c.version == number)
        row = (await conn.execute(statement)).mappings().first()
    return None if row is None else _version(row)


async def active(engine: AsyncEngine, served_model: str) -> LessonVersion | None:
    """The version runs of `served_model` use; None when none is active."""
    async with engine.connect() as conn:
        statement = select(lessons).where(lessons.c.served_model == served_model, lessons.c.status == "active")
        row = (await conn.execute(statement)).mappings().first()
    return None if row is None else _version(row)


async def settle(
    engine: AsyncEngine, served_model: str, number: int, status: Status, note: dict[str, Any] | None = None
) -> None:
    """`number`'s status, and what its eval found (None: its note kept): `active` retires the version active
    before."""
    async with writing(engine).begin() as conn:
        if status == "active":
            await conn.execute(
                update(lessons)
                .where(lessons.c.served_model == served_model, lessons.c.status == "active")
                .values(status="retired")
            )
        values: dict[str, Any] = {"status": status}
        if note is not None:
            values["note"] = json.dumps(note, ensure_ascii=False)
        await conn.execute(
            update(lessons).where(lessons.c.served_model == served_model, lessons.c.version == number).values(**values)
        )
