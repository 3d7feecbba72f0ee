"""Runs belong to a key (issue 43): each run records the named key that made it, and the runs API shows a key that is
not `admin` only its own runs — another key's run is a 404 like an unknown id, on every path — while an admin key
sees every run and a nameless key (`auth_api_keys_env`) the runs no named key made. Through a real uvicorn with the
openai SDK, on a SQLite file and on PostgreSQL; the command line reads the same store."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from adapter_critic import AdapterCriticMiddleware
from adapter_critic.store.recorder import RunOpened
from adapter_critic.store.records import EVERY_RUN, runs_of_key
from adapter_critic.store.runstore import open_store

from ..cli.conftest import invoke
from ..conftest import RemoteUpstream, asgi_client, chat, run_app, sdk
from ..middleware_app import LocalModel, local_config
from .runs import request

TEAM, OTHER, OPS, NAMELESS = "sk-owners-team", "sk-owners-other", "sk-owners-ops", "sk-owners-nameless"


def config(upstream: str) -> str:
    api = {"model": "api-model", "base_url": f"{upstream}/v1"}
    return json.dumps(
        {
            "retries": 0,
            "default_api_key_env": "OWNERS_UPSTREAM_KEY",
            "auth_api_keys_env": "OWNERS_NAMELESS_KEYS",
            "served_models": {
                "team-direct": {"mode": "direct", "api": api},
                # Its critique is a child run of team-direct's: the child belongs to the same key.
                "team-nested": {"mode": "critic", "api": api, "critic": {"served": "team-direct"}},
                "team-cached": {"mode": "direct", "api": api, "cache": True},
            },
            "auth": {
                "keys": [
                    {"name": "team", "key_env": "OWNERS_TEAM_KEY", "models": ["team-*"]},
                    {"name": "other", "key_env": "OWNERS_OTHER_KEY", "models": ["team-*"]},
                    {"name": "ops", "key_sha256": hashlib.sha256(OPS.encode()).hexdigest(), "admin": True},
                ]
            },
        }
    )


@pytest.fixture
def served(upstream_url: str, store_url: str, tmp_path: Path) -> Iterator[str]:
    RemoteUpstream(upstream_url).reset()
    env = {
        "ADAPTER_CRITIC_STORE": store_url,
        "OWNERS_TEAM_KEY": TEAM,
        "OWNERS_OTHER_KEY": OTHER,
        "OWNERS_NAMELESS_KEYS": NAMELESS,
    }
    with run_app(tmp_path / "config.json", config(upstream_url), **env) as (url, _):
        with httpx.Client(timeout=10) as client:
            client.get(f"{url}/v1/health").raise_for_status()
        yield url


def ask(url: str, key: str, model: str, content: str, **extra: Any) -> tuple[str, str | None]:
    """One completion through the openai SDK as `key`: its run id and the cache's header."""
    client = sdk(OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], **extra
    )
    return raw.parse().id, raw.headers.get("x-adapter-critic-cache")


def get(url: str, key: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{url}/v1{path}", params=params, headers={"authorization": f"Bearer {key}"}, timeout=30)


def listed(url: str, key: str, **params: Any) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = get(url, key, "/runs", limit=1000, **params).json()["data"]
    return data


def wait_for_runs(url: str, count: int) -> None:
    """Until `count` runs are written and finished (the store writes in the background: long-poll, as an admin)."""
    for _ in range(200):
        data = listed(url, OPS)
        if len(data) >= count and all(run["status"] != "running" for run in data):
            return
        httpx.get(f"{url}/v1/health")  # the next look waits on the server, not on a sleep
    raise AssertionError(f"fewer than {count} finished runs at {url}")


def assert_not_found(response: httpx.Response, run_id: str) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "run_not_found"
    assert f"No run {run_id!r}" in response.json()["error"]["message"]


def test_a_key_sees_its_own_runs_and_an_admin_every_run(served: str, store_url: str) -> None:
    url = served
    team_run, _ = ask(url, TEAM, "team-direct", "team asks")
    nested, _ = ask(url, TEAM, "team-nested", "team asks for a critique")
    ops_run, _ = ask(url, OPS, "team-direct", "ops asks")
    other_run, _ = ask(url, OTHER, "team-direct", "other asks")
    nameless_run, _ = ask(url, NAMELESS, "team-direct", "a nameless key asks")
    # The same deterministic question from ops, then team: today's cache answers team with ops's run.
    cached_source, _ = ask(url, OPS, "team-cached", "the same question", temperature=0)
    cache_hit, hit = ask(url, TEAM, "team-cached", "the same question", temperature=0)
    wait_for_runs(url, 8)  # the nested run's child included

    everything = listed(url, OPS)
    owners = {run["id"]: run["key_name"] for run in everything}
    child = next(run for run in everything if run["parent_run_id"] == nested)
    assert owners == {
        team_run: "team",
        nested: "team",
        child["id"]: "team",  # a child run belongs to the key its parent's request came with
        ops_run: "ops",
        other_run: "other",
        nameless_run: None,
        cached_source: "ops",
        cache_hit: "team",
    }

    team_ids = {run["id"] for run in listed(url, TEAM)}
    assert team_ids == {team_run, nested, child["id"], cache_hit}
    assert {run["id"] for run in listed(url, OTHER)} == {other_run}
    # With named keys configured, a nameless key sees only the runs no named key made.
    assert {run["id"] for run in listed(url, NAMELESS)} == {nameless_run}
    # The key_name filter: an admin's list of one key's runs; another key's name lists nothing for team.
    assert {run["id"] for run in listed(url, OPS, key_name="team")} == team_ids
    assert listed(url, TEAM, key_name="ops") == []
    assert listed(url, TEAM, request_id=ops_run) == []

    for run_id in (ops_run, other_run, nameless_run, cached_source):  # every path that reveals a run: 404
        for path in (f"/runs/{run_id}", f"/runs/{run_id}/events"):
            assert_not_found(get(url, TEAM, path), run_id)
    unknown = "chatcmpl-no-such-run"
    assert get(url, TEAM, f"/runs/{unknown}").json() == {
        "error": {
            **get(url, TEAM, f"/runs/{ops_run}").json()["error"],
            "message": f"No run {unknown!r} in the run store.",
        }
    }  # the same envelope as an unknown id: ids cannot be probed
    for run_id in (team_run, nested, child["id"]):
        assert_not_found(get(url, OTHER, f"/runs/{run_id}"), run_id)
        assert_not_found(get(url, OTHER, f"/runs/{run_id}/events"), run_id)

    own = get(url, TEAM, f"/runs/{team_run}").json()
    assert own["key_name"] == "team" and own["answer"]["content"]
    parent = get(url, TEAM, f"/runs/{nested}").json()
    assert [c["id"] for c in parent["children"]] == [child["id"]]
    assert child["id"] in {s["child_run_id"] for s in parent["stages"]}
    assert get(url, TEAM, f"/runs/{child['id']}").json()["parent_run_id"] == nested
    events = get(url, TEAM, f"/runs/{nested}/events").text
    assert '"key_name":"team"' in events and "event: end\n" in events
    admin_view = get(url, OPS, f"/runs/{team_run}").json()
    assert admin_view["key_name"] == "team" and admin_view["answer"] == own["answer"]

    if hit == "hit":  # a cache shared by every key: the hit is team's, the run it answered from ops's
        assert get(url, OPS, f"/runs/{cache_hit}").json()["cached_from"] == cached_source
        assert get(url, TEAM, f"/runs/{cache_hit}").json()["cached_from"] is None
        assert next(r for r in listed(url, TEAM) if r["id"] == cache_hit)["cached_from"] is None

    # The command line reads the store itself: every run, each with its key.
    shown = invoke("runs", "show", team_run, "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert "key: team" in shown.output
    table = invoke("runs", "list", "--key", "other", "--store", store_url, env={"COLUMNS": "250"})
    assert table.exit_code == 0 and other_run in table.output and team_run not in table.output
    assert "key" in table.output and "other" in table.output
    exported = invoke("runs", "export", "--format", "csv", "--store", store_url)
    rows = {row["id"]: row["key_name"] for row in csv.DictReader(io.StringIO(exported.output))}
    assert rows[ops_run] == "ops" and rows[nameless_run] == ""
    jsonl = invoke("runs", "export", "--key", "team", "--store", store_url)
    assert {json.loads(line)["key_name"] for line in jsonl.output.splitlines()} == {"team"}


@pytest.mark.anyio
async def test_links_to_a_run_another_key_made_are_null(store_url: str) -> None:
    """A parent, a child or a cache hit's source that the reader may not see: the link is null, the id never told."""
    store = await open_store(store_url)
    now = time.time()

    def opened(run_id: str, key: str | None, *, parent: str | None = None, cached_from: str | None = None) -> None:
        store.enqueue(
            RunOpened(
                run_id,
                run_id,
                "m",
                "direct",
                False,
                now,
                "full",
                request(),
                key_name=key,
                parent_run_id=parent,
                parent_stage=None if parent is None else "critic",
                cached_from=cached_from,
            )
        )

    async with store:
        opened("ops-run", "ops")
        opened("team-hit", "team", cached_from="ops-run")
        opened("team-child-of-ops", "team", parent="ops-run")  # as a child recorded before children had keys
        opened("ops-child", "ops", parent="team-parent")
        opened("team-parent", "team")
        await store.flush()
        team = runs_of_key("team")
        hit = await store.get_run("team-hit", seen_by=team)
        assert hit is not None and hit.cached_from is None
        orphan = await store.get_run("team-child-of-ops", seen_by=team)
        assert orphan is not None and orphan.parent_run_id is None and orphan.parent_stage is None
        parent = await store.get_run("team-parent", seen_by=team)
        assert parent is not None and parent.children == []
        assert await store.get_run("ops-run", seen_by=team) is None
        page = await store.list_runs(seen_by=team)
        assert {run.id: (run.cached_from, run.parent_run_id) for run in page.data} == {
            "team-hit": (None, None),
            "team-child-of-ops": (None, None),
            "team-parent": (None, None),
        }
        assert [kind async for kind, _ in store.follow("ops-run", seen_by=team)] == []
        everything = await store.get_run("team-hit", seen_by=EVERY_RUN)
        assert everything is not None and everything.cached_from == "ops-run"
        nameless = await store.list_runs(seen_by=runs_of_key(None))
        assert nameless.data == []


@pytest.mark.anyio
async def test_beside_the_middleware_a_key_sees_its_own_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OWNERS_TEAM_KEY", TEAM)
    keys = [
        {"name": "team", "key_env": "OWNERS_TEAM_KEY"},
        {"name": "ops", "key_sha256": hashlib.sha256(OPS.encode()).hexdigest(), "admin": True},
    ]
    config = local_config(store={"url": f"sqlite:///{tmp_path / 'runs.db'}"}, auth={"keys": keys})
    app = AdapterCriticMiddleware(LocalModel().app, config=config)
    as_team, as_ops = {"authorization": f"Bearer {TEAM}"}, {"authorization": f"Bearer {OPS}"}
    async with asgi_client(app) as client:
        team_run = (await client.post("/v1/chat/completions", json=chat("local-adapter"), headers=as_team)).json()["id"]
        ops_run = (await client.post("/v1/chat/completions", json=chat("local-adapter"), headers=as_ops)).json()["id"]
        await app.service.store.flush()  # type: ignore[union-attr]
        team_sees = (await client.get("/v1/runs", headers=as_team)).json()["data"]
        ops_sees = (await client.get("/v1/runs", headers=as_ops)).json()["data"]
        hidden = await client.get(f"/v1/runs/{ops_run}", headers=as_team)
    assert [(run["id"], run["key_name"]) for run in team_sees] == [(team_run, "team")]
    assert [(run["id"], run["key_name"]) for run in ops_sees] == [(ops_run, "ops"), (team_run, "team")]
    assert_not_found(hidden, ops_run)
