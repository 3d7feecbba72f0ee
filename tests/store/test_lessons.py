"""Lessons versions in the run store (schema version 11), on SQLite and PostgreSQL: numbered per served model, a
candidate until settled, at most one active (activating one retires the one before), each with what its check found;
a store of version 10 is upgraded with its runs kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapter_critic import Config
from adapter_critic.store import lessons, open_store
from adapter_critic.store.schema import VERSION
from adapter_critic.workflows.prompts import LESSONS_LEAD

from ..conftest import UPSTREAM_URL, AppFactory, chat
from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio


async def test_versions_are_numbered_and_one_is_active(store_url: str) -> None:
    async with await open_store(store_url) as store:
        engine = store.database.engine
        first = await lessons.add(engine, "careful", ["Say who checked it."], None)
        other = await lessons.add(engine, "other", ["Be brief."], None)
        assert (first.version, other.version, first.status) == (1, 1, "candidate")
        assert await lessons.active(engine, "careful") is None  # a candidate is not used
        await lessons.settle(engine, "careful", 1, "active", {"not_worse": True, "wins": 3})
        second = await lessons.add(engine, "careful", ["Say who checked it.", "Quote the source."], 1)
        await lessons.settle(engine, "careful", 2, "active", {"not_worse": True})
        found = await lessons.versions(engine, "careful")
        assert [(v.version, v.status, v.parent) for v in found] == [(2, "active", 1), (1, "retired", None)]
        assert found[1].note == {"not_worse": True, "wins": 3} and second.lessons == found[0].lessons
        await lessons.settle(engine, "careful", 1, "active")  # a rollback: the note is kept
        active = await lessons.active(engine, "careful")
        assert active is not None and active.version == 1 and active.note == {"not_worse": True, "wins": 3}
        assert (await lessons.active(engine, "other")) is None


def test_lessons_are_bounded() -> None:
    found = lessons.bounded(["  Say   who checked it. ", "say who checked it.", "x" * 400, "", "Be brief."], 2)
    assert found == ["Say who checked it.", "x" * lessons.MAX_LESSON_CHARS]
    assert VERSION >= 11


def test_the_cache_keeps_apart_answers_made_with_other_lessons() -> None:
    """A learning model's answers change with its lessons: its cache key includes them, and a plan without lessons
    keeps the key it had before lessons existed."""
    import dataclasses

    from adapter_critic.cache.key import plan_document
    from adapter_critic.core import Plan, StageTarget

    plan = Plan(served_id="careful", mode="critic", api=StageTarget(model="m", base_url="http://127.0.0.1:9/v1"))
    document = plan_document(plan, lambda served_id: plan)
    assert b"lessons" not in document
    one = plan_document(dataclasses.replace(plan, lessons=("Say who checked it.",), lessons_version=1), lambda s: plan)
    two = plan_document(dataclasses.replace(plan, lessons=("Be brief.",), lessons_version=2), lambda s: plan)
    assert len({document, one, two}) == 3


async def test_a_request_for_a_learning_model_carries_its_lessons_and_its_use_as_a_stage_does_not(
    tmp_path: Path, serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    """`careful` learns; `outer` runs it as its critic stage. A request for `careful` gives its critic the active
    lessons and says which version; a request for `outer` runs `careful` without them (lessons are read for the model
    a request names, docs/guides/learning.md) and says none."""
    store = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    async with await open_store(store) as opened:
        engine = opened.database.engine
        await lessons.add(engine, "careful", ["Say who checked it."], None)
        await lessons.settle(engine, "careful", 1, "active", {"not_worse": True})
    api = {"model": "m", "base_url": UPSTREAM_URL}
    config = Config.from_dict(
        {
            "store": {"url": store},
            "served_models": {
                "careful": {"mode": "critic", "api": api, "learning": {"learner": "careful"}},
                "outer": {"mode": "critic", "api": api, "critic": {"served": "careful"}},
            },
        }
    )
    async with serve(config) as client:
        direct = (await client.post("/chat/completions", json=chat("careful"))).json()
        with_lessons = [c for c in upstream.calls if LESSONS_LEAD in json.dumps(c.body)]
        assert direct["adapter_critic"]["intermediate"]["lessons_version"] == 1 and len(with_lessons) == 1
        upstream.calls.clear()
        nested = (await client.post("/chat/completions", json=chat("outer"))).json()
        assert not any(LESSONS_LEAD in json.dumps(c.body) for c in upstream.calls) and upstream.calls
        assert "lessons_version" not in json.dumps(nested["adapter_critic"])
