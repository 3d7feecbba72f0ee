"""The runs API: `GET /runs`, `/runs/{id}`, `/runs/{id}/events` — in-process, beside the middleware, and through a
real uvicorn serving the demo with no config (recording to the user's data directory)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from openai import OpenAI
from starlette.types import Message

from adapter_critic import AdapterCriticMiddleware

from ..conftest import asgi_client, chat, run_server, sdk, stop_server
from ..middleware_app import LocalModel, local_config
from ..scripted_upstream import Reply, ScriptedUpstream
from .runs import recording

pytestmark = pytest.mark.anyio

SUMMARY_FIELDS = {
    "id", "object", "request_id", "served_model", "mode", "stream", "status", "degraded",
    "started_at", "finished_at", "duration_ms", "usage", "error", "cost", "parent_run_id", "parent_stage",
    "cached_from", "key_name", "feedback_count",
}  # fmt: skip
DETAIL_FIELDS = SUMMARY_FIELDS | {
    "capture",
    "request",
    "intermediate",
    "answer",
    "stages",
    "children",
    "feedback",
    "shadows",
}
STAGE_FIELDS = {
    "index", "stage", "status", "target_model", "target_host", "started_offset_ms", "elapsed_ms", "attempts",
    "usage", "usage_reported", "messages", "output", "error", "cost", "child_run_id",
}  # fmt: skip


async def test_list_and_detail(upstream: ScriptedUpstream, store_url: str) -> None:
    async with recording(upstream, store_url) as (client, store):
        ids = []
        for model in ("m-direct", "m-critic", "m-adapter"):
            ids.append((await client.post("/chat/completions", json=chat(model))).headers["x-request-id"])
        await store.flush()
        listed = (await client.get("/runs")).json()
        first = (await client.get("/runs", params={"limit": 2})).json()
        second = (await client.get("/runs", params={"limit": 2, "cursor": first["next_cursor"]})).json()
        critic = (await client.get("/runs", params={"mode": "critic", "status": "ok", "degraded": "false"})).json()
        detail = (await client.get(f"/runs/{ids[1]}")).json()
    assert listed["object"] == "list" and [run["id"] for run in listed["data"]] == ids[::-1]
    assert set(listed["data"][0]) == SUMMARY_FIELDS and listed["next_cursor"] is None
    assert [r["id"] for r in first["data"]] == ids[:0:-1] and first["has_more"]
    assert [r["id"] for r in second["data"]] == ids[:1] and second["next_cursor"] is None
    assert [r["id"] for r in critic["data"]] == [ids[1]]
    assert set(detail) == DETAIL_FIELDS and detail["status"] == "ok"
    assert [s["stage"] for s in detail["stages"]] == ["api_draft", "critic", "api_final"]
    assert set(detail["stages"][0]) == STAGE_FIELDS
    assert set(detail["intermediate"]) == {"api_draft", "critic", "final"}


@pytest.mark.parametrize(
    ("path", "status", "param"),
    [
        ("/runs?status=fine", 400, "status"),
        ("/runs?degraded=maybe", 400, "degraded"),
        ("/runs?since=yesterday", 400, "since"),
        ("/runs?until=nan", 400, "until"),
        ("/runs?min_cost=cheap", 400, "min_cost"),
        ("/runs?min_cost=-0.5", 400, "min_cost"),
        ("/runs?min_cost=inf", 400, "min_cost"),
        ("/runs?limit=0", 400, "limit"),
        ("/runs?limit=1001", 400, "limit"),
        ("/runs?cursor=bm90IGEgY3Vyc29y", 400, "cursor"),
        ("/runs?colour=red", 400, "colour"),
        ("/runs/bad%20id", 400, "id"),
        ("/runs/no-such-run", 404, "id"),
        ("/runs/no-such-run/events", 404, "id"),
        ("/runs/x/other", 404, None),
    ],
)
async def test_bad_ids_and_filters_get_the_error_envelope(
    upstream: ScriptedUpstream, tmp_path: Path, path: str, status: int, param: str | None
) -> None:
    async with recording(upstream, f"sqlite:///{tmp_path / 'runs.db'}") as (client, _):
        response = await client.get(path)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]
    if status == 404 and param:
        assert error["code"] == "run_not_found"


async def test_the_runs_api_needs_the_inbound_key_and_can_be_off(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "k-inbound-123456")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with recording(upstream, url, top={"auth_api_keys_env": "INBOUND_KEYS"}) as (client, _):
        assert (await client.get("/runs")).status_code == 401
        assert (await client.get("/runs", headers={"authorization": "Bearer k-inbound-123456"})).status_code == 200
    async with recording(upstream, url, api=False) as (client, store):
        await client.post("/chat/completions", json=chat("m-direct"))
        await store.flush()
        assert (await client.get("/runs")).status_code == 404  # not served, though the run was recorded
        assert len((await store.list_runs()).data) == 1


async def test_events_replay_a_run_and_tail_one_still_going(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(Reply("the draft"), Reply("the critique", delay=60))
    holding = upstream.holding_signal()
    async with recording(upstream, f"sqlite:///{tmp_path / 'runs.db'}") as (client, store):
        app = client._transport.app  # type: ignore[attr-defined]
        events: list[tuple[str, dict[str, Any]]] = []
        got_stage = anyio.Event()
        scope = {
            "type": "http", "method": "GET", "path": "", "raw_path": b"", "root_path": "", "query_string": b"",
            "headers": [], "http_version": "1.1", "scheme": "http", "server": ("testserver", 80),
            "client": ("127.0.0.1", 1), "asgi": {"version": "3.0"},
        }  # fmt: skip

        # The events endpoint called directly: httpx's ASGI transport would wait for the end of the stream.
        async def send(message: Message) -> None:
            for block in message.get("body", b"").decode().split("\n\n"):
                lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
                if "event" in lines:
                    events.append((lines["event"], json.loads(lines["data"])))
                    if lines["event"] == "stage":
                        got_stage.set()

        async def receive() -> Message:
            await anyio.sleep_forever()
            raise AssertionError

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tail, anyio.create_task_group() as request:
                request.start_soon(functools.partial(client.post, "/chat/completions", json=chat("m-critic")))
                await holding.wait()
                await store.flush()
                [run] = (await store.list_runs()).data
                tail.start_soon(app, {**scope, "path": f"/runs/{run.id}/events"}, receive, send)
                await got_stage.wait()  # the finished draft, replayed; the critic is still held
                request.cancel_scope.cancel()  # the client goes away: the run ends (cancelled), the tail sees it
        replay = (await client.get(f"/runs/{run.id}/events")).text
    assert [(kind, item.get("stage") or item["status"]) for kind, item in events] == [
        ("run", "running"),
        ("stage", "api_draft"),
        *[("stage", "critic")] * (len(events) - 3),
        ("end", "cancelled"),
    ]
    assert replay.startswith("event: run\ndata: {") and "id: 0\nevent: stage\n" in replay
    assert replay.rstrip().splitlines()[-2] == "event: end"


async def test_the_middleware_serves_the_runs_api_beside_its_path(tmp_path: Path) -> None:
    model = LocalModel()
    config = local_config(store={"url": f"sqlite:///{tmp_path / 'runs.db'}"})
    app = AdapterCriticMiddleware(model.app, config=config)
    async with asgi_client(app) as client:
        answer = await client.post("/v1/chat/completions", json=chat("local-adapter"))
        await app.service.store.flush()  # type: ignore[union-attr]
        runs = (await client.get("/v1/runs")).json()
    assert answer.status_code == 200 and answer.headers["x-request-id"] == runs["data"][0]["id"]
    unrecorded = AdapterCriticMiddleware(model.app, config=local_config())
    async with asgi_client(unrecorded) as client:
        assert (await client.get("/v1/runs")).status_code == 404  # the wrapped app's own 404: nothing recorded


def test_the_standalone_demo_records_to_the_data_dir_and_serves_the_runs_api(user_data_dir: Path) -> None:
    env = {"ADAPTER_CRITIC_CONFIG": "", "XDG_DATA_HOME": str(user_data_dir / "uvicorn")}  # no config: the demo
    args = ["-m", "uvicorn", "adapter_critic.asgi:app", "--log-level", "info"]
    with run_server(args, env=env) as (url, proc):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        plain = client.chat.completions.with_raw_response.create(
            model="demo-critic", messages=[{"role": "user", "content": "Hi"}], extra_headers={"x-request-id": "mine-1"}
        )
        completion = plain.parse()
        stream = client.chat.completions.create(
            model="demo-direct", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        chunks = list(stream)
        streamed_id = chunks[-1].model_extra["adapter_critic"]["run_id"]  # type: ignore[index]
        runs = _wait_for_runs(url, 2)
        detail = httpx.get(f"{url}/v1/runs/{completion.id}").json()
        events = httpx.get(f"{url}/v1/runs/{completion.id}/events").text
        by_request = httpx.get(f"{url}/v1/runs", params={"request_id": "mine-1"}).json()
        bad = httpx.get(f"{url}/v1/runs", params={"since": "soon"})
        log = stop_server(proc)
    assert plain.headers["x-request-id"] == "mine-1"
    assert completion.model_extra is not None and completion.model_extra["adapter_critic"]["run_id"] == completion.id
    assert [r["id"] for r in runs] == [streamed_id, completion.id]
    assert runs[0]["stream"] and runs[0]["mode"] == "direct" and runs[1]["request_id"] == "mine-1"
    assert [s["stage"] for s in detail["stages"]] == ["api_draft", "critic", "api_final"]
    assert detail["answer"]["content"] == completion.choices[0].message.content
    assert events.count("event: stage\n") == 3 and "event: end\n" in events
    assert [r["id"] for r in by_request["data"]] == [completion.id]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
    where = user_data_dir / "uvicorn" / "adapter_critic" / "runs.sqlite3"
    assert f"recording runs to sqlite+aiosqlite:///{where}" in log
    assert where.exists()


def _wait_for_runs(url: str, count: int) -> list[dict[str, Any]]:
    """The runs listed once `count` of them are finished (the store writes in the background: long-poll the list)."""
    for _ in range(200):
        data: list[dict[str, Any]] = httpx.get(f"{url}/v1/runs").json()["data"]
        if len(data) >= count and all(run["status"] != "running" for run in data):
            return data
        with httpx.Client() as poll:  # the next look waits on the server, not on a sleep
            poll.get(f"{url}/v1/health")
    raise AssertionError(f"fewer than {count} finished runs at {url}")
