"""Runs recorded by the server: run ids on every response, two-phase records through the app, errors, capture,
which apps record (standalone default, `none`, mounted only when configured, the env var) — on both backends where
the database matters."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy

from adapter_critic import create_app
from adapter_critic.http.create import create_standalone_app
from adapter_critic.store import open_store
from adapter_critic.store.records import RunDetail, StoredStage

from ..conftest import UPSTREAM_URL, asgi_client, chat, make_config
from ..scripted_upstream import Reply, ScriptedUpstream
from .runs import recording

pytestmark = pytest.mark.anyio


async def test_every_response_carries_its_request_id(serve: Any) -> None:
    async with serve() as client:
        plain = await client.post("/chat/completions", json=chat("m-direct"))
        body = plain.json()
        assert plain.headers["x-request-id"] == body["id"] == body["adapter_critic"]["run_id"]
        kept = await client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": "trace-42.a"})
        assert kept.headers["x-request-id"] == "trace-42.a"
        assert kept.json()["adapter_critic"]["run_id"] == kept.json()["id"] != "trace-42.a"
        for odd_id in ("x" * 129, "two words", "<script>", "-starts-with-dash"):
            odd = await client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": odd_id})
            assert odd.headers["x-request-id"] == odd.json()["id"]  # not sane: replaced by the run id
        streamed = await client.post("/chat/completions", json=chat("m-direct", stream=True))
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
        assert streamed.headers["x-request-id"] == events[0]["id"] == events[-1]["adapter_critic"]["run_id"]
        for error in (
            await client.post("/chat/completions", content=b"{"),
            await client.post("/chat/completions", json=chat("nope")),
            await client.get("/nowhere"),
        ):
            assert error.status_code >= 400 and error.headers["x-request-id"].startswith("chatcmpl-")


async def test_the_logs_of_a_run_carry_its_request_id(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "adapter_critic")
    async with serve() as client:
        await client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": "abc-123"})
    lines = [r.getMessage() for r in caplog.records if getattr(r, "request_id", None) == "abc-123"]
    assert lines and all(line.startswith("[abc-123]") for line in lines)


async def test_a_run_is_visible_while_it_runs_and_finalised_when_it_ends(
    upstream: ScriptedUpstream, store_url: str
) -> None:
    upstream.script(Reply("the draft"), Reply("the critique", delay=60))
    holding = upstream.holding_signal()
    async with recording(upstream, store_url) as (client, store):
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(client.post, "/chat/completions", json=chat("m-critic", "secret plan")))
                await holding.wait()  # the draft is done, the critic is being asked
                await store.flush()
                [running] = (await store.list_runs()).data
                mid = await store.get_run(running.id)
                async with store.database.engine.connect() as conn:
                    query = sqlalchemy.text("SELECT messages, request_messages FROM stages")
                    [(messages, own)] = [tuple(row) for row in await conn.execute(query)]
                tg.cancel_scope.cancel()  # the client goes away: the run is cancelled
        await store.flush()
        end = await store.get_run(running.id)
    assert mid is not None and mid.status == "running" and mid.finished_at is None
    assert [(s.stage, s.status, s.output) for s in mid.stages] == [("api_draft", "ok", "the draft")]
    assert mid.request is not None and mid.request.messages == [{"role": "user", "content": "secret plan"}]
    # A stage of a run still going is a row of `stages`; it sent the client's messages: kept once, in the request.
    assert (messages, bool(own)) == (None, True) and mid.stages[0].messages == mid.request.messages
    assert end is not None and end.status == "cancelled" and end.finished_at is not None
    assert [(s.stage, s.status) for s in end.stages] == [("api_draft", "ok"), ("critic", "cancelled")]


async def _critic_run(
    upstream: ScriptedUpstream, store_url: str, query: str
) -> tuple[httpx.Response, RunDetail | None, list[tuple[Any, ...]], list[StoredStage]]:
    """A critic run (draft, critique, final) recorded through the app: its response, its record read back, the rows
    `query` selects from the store, and its stages as `follow` replays them."""
    upstream.script(Reply("the draft"), Reply("the critique"), Reply("the final"))
    async with recording(upstream, store_url) as (client, store):
        response = await client.post("/chat/completions", json=chat("m-critic", "what to store"))
        await store.flush()
        run_id = response.headers["x-request-id"]
        run = await store.get_run(run_id)
        followed = [item async for kind, item in store.follow(run_id) if kind == "stage"]
        async with store.database.engine.connect() as conn:
            rows = [tuple(row) for row in await conn.execute(sqlalchemy.text(query))]
    return response, run, rows, followed


async def test_the_clients_messages_are_stored_once_and_read_back_for_every_stage_that_sent_them(
    upstream: ScriptedUpstream, store_url: str
) -> None:
    _, run, stored, followed = await _critic_run(upstream, store_url, "SELECT record FROM runs")
    # The run ended in the batch its stages did: they are written in its end's document, not as rows of `stages`.
    end = json.loads(stored[0][0])
    client_messages = [{"role": "user", "content": "what to store"}]
    assert run is not None and run.request is not None and run.request.messages == client_messages
    # The draft sent the client's messages: they are kept once, in the run's request, and read back for the stage.
    assert [stage["messages"] is None for stage in end["stages"]] == [True, False, False]
    assert end["request_messages"] == [0]
    assert run.stages[0].messages == client_messages
    assert followed[0].messages == client_messages
    # The critic and the final call sent messages of their own: stored with the stage.
    for stage in (*run.stages[1:], *followed[1:]):
        assert stage.messages is not None and stage.messages != client_messages
        assert any("the draft" in json.dumps(message) for message in stage.messages)


async def test_a_stage_output_that_is_the_answer_or_an_intermediate_text_is_stored_once(
    upstream: ScriptedUpstream, store_url: str
) -> None:
    response, run, stored, _ = await _critic_run(upstream, store_url, "SELECT record, answer, intermediate FROM runs")
    [(record, *old_columns)] = stored
    end = json.loads(record)
    extension = response.json()["adapter_critic"]
    # Read back whole: the answer and the extension's intermediate, as the client got them.
    assert run is not None and run.answer is not None
    assert run.answer.content == response.json()["choices"][0]["message"]["content"] == "the final"
    assert run.intermediate == extension["intermediate"] and "the draft" in run.intermediate.values()
    # Stored once: the run's end names the stages whose outputs they are, and holds those texts only in the stages.
    assert old_columns == [None, None]
    outputs = [stage["output"] for stage in end["stages"]]
    assert outputs == [stage.output for stage in run.stages] == ["the draft", "the critique", "the final"]
    assert end["answer"]["content"] is None and not set(end["intermediate"].values()) & set(outputs)
    named = end["from_stages"]
    assert outputs[named["answer"]] == "the final"
    assert {key: outputs[index] for key, index in named["intermediate"].items()} == {
        key: value for key, value in extension["intermediate"].items() if value in outputs
    }


async def test_a_failed_run_keeps_its_error_and_every_attempt(upstream: ScriptedUpstream, store_url: str) -> None:
    upstream.script(Reply(status=500, body='{"error": {"message": "boom"}}'), Reply(status=503, body="down"))
    async with recording(upstream, store_url, top={"retries": 1, "retry_backoff_seconds": 0}) as (client, store):
        response = await client.post("/chat/completions", json=chat("m-direct"))
        await store.flush()
        run = await store.get_run(response.headers["x-request-id"])  # an error's header names its run too
    assert response.status_code == 502
    assert run is not None and run.status == "error"
    assert run.error is not None and run.error.status == 502 and run.error.type == "upstream_error"
    assert run.error.message == response.json()["error"]["message"]
    [stage] = run.stages
    assert stage.status == "error" and [a.error.status for a in stage.attempts if a.error] == [500, 503]
    assert stage.target_model == "api-model" and stage.target_host == "upstream.test"


async def test_a_forwarded_callers_token_never_reaches_the_store(upstream: ScriptedUpstream, store_url: str) -> None:
    token = "caller-token-8f3b2c71d9"  # no configured key: only the recorder knows to mask it
    served = {"m-forward": {"mode": "direct", "api": {"model": "api-model", "base_url": UPSTREAM_URL}}}
    served["m-forward"]["api"]["forward_client_authorization"] = True
    upstream.script(Reply(f"you said {token}"))
    async with recording(upstream, store_url, top={"served_models": served}) as (client, store):
        asked = chat("m-forward", f"my token is {token}")
        response = await client.post("/chat/completions", json=asked, headers={"authorization": f"Bearer {token}"})
        await store.flush()
        run = await store.get_run(response.headers["x-request-id"])
        async with store.database.engine.connect() as conn:
            stored = [repr(tuple(row)) for table in ("runs", "stages") for row in await conn.execute(
                sqlalchemy.text(f"SELECT * FROM {table}")
            )]  # fmt: skip
    assert upstream.calls[0].headers["authorization"] == f"Bearer {token}"  # forwarded, as configured
    assert response.json()["choices"][0]["message"]["content"] == f"you said {token}"  # the client's own answer
    assert run is not None and run.answer is not None and run.answer.content == "you said ***"
    assert run.request is not None and run.request.messages == [{"role": "user", "content": "my token is ***"}]
    assert stored and not any(token in row for row in stored)


async def test_streamed_and_degraded_runs_are_recorded(upstream: ScriptedUpstream, tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upstream.script(Reply("draft"), Reply(status=400, body='{"error": {"message": "no"}}'))
    async with recording(upstream, url) as (client, store):
        response = await client.post("/chat/completions", json=chat("m-critic", stream=True))
        await store.flush()
        [summary] = (await store.list_runs()).data
        run = await store.get_run(summary.id)
    assert response.headers["x-request-id"] == summary.id == summary.request_id
    assert run is not None and run.stream and run.status == "degraded" and run.degraded
    assert run.answer is not None and run.answer.content == "draft"
    assert [(s.stage, s.status) for s in run.stages] == [("api_draft", "ok"), ("critic", "error")]
    assert run.request is not None and run.request.options["stream"] is True


async def test_which_apps_record(upstream: ScriptedUpstream, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert create_app(make_config()).state.adapter_critic.store is None  # mounted, not configured
    standalone = create_standalone_app(make_config())
    assert standalone.state.adapter_critic.store.where().endswith("/adapter_critic/runs.sqlite3")
    assert create_standalone_app(make_config(store={"url": "none"})).state.adapter_critic.store is None
    monkeypatch.setenv("ADAPTER_CRITIC_STORE", f"sqlite:///{tmp_path / 'env.db'}")
    assert create_app(make_config()).state.adapter_critic.store.where().endswith("env.db")
    monkeypatch.setenv("ADAPTER_CRITIC_STORE", "none")
    assert (
        create_standalone_app(make_config(store={"url": f"sqlite:///{tmp_path}/x.db"})).state.adapter_critic.store
        is None
    )


async def test_the_store_url_is_checked_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter_critic import ConfigError

    with pytest.raises(ConfigError, match=r"store\.url scheme 'mysql' is not supported"):
        create_app(make_config(store={"url": "mysql://db/runs"}))


async def test_the_standalone_default_records_and_says_where(
    upstream: ScriptedUpstream, user_data_dir: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "adapter_critic")
    app = create_standalone_app(make_config())
    async with asgi_client(app):
        pass
    where = user_data_dir / "adapter_critic" / "runs.sqlite3"
    assert f"recording runs to sqlite+aiosqlite:///{where}" in caplog.text
    async with await open_store(f"sqlite:///{where}") as store:
        assert (await store.list_runs()).data is not None


async def test_upstream_hosts_are_recorded_never_keys(upstream: ScriptedUpstream, tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    served = {
        "m-direct": {"mode": "direct", "api": {"model": "api-model", "base_url": "http://user:pw@upstream.test/v1"}}
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(make_config(served_models=served, store={"url": url}), http_client=upstream_client)
        async with asgi_client(app) as client:
            await client.post("/chat/completions", json=chat("m-direct"))
            store = app.state.adapter_critic.store
            await store.flush()
            [summary] = (await store.list_runs()).data
            run = await store.get_run(summary.id)
    assert run is not None and run.stages[0].target_host == "upstream.test"
    assert "pw" not in json.dumps([s.target_host for s in run.stages])
    assert UPSTREAM_URL.startswith("http://upstream.test")


async def test_a_default_store_that_cannot_open_is_given_up_an_asked_for_one_stops_start_up(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))  # the data dir cannot be made
    async with asgi_client(create_standalone_app(make_config())) as client:  # it starts all the same
        models = await client.get("/v1/models")
        runs = await client.get("/v1/runs")
    assert "not recording runs: the run store at" in caplog.text
    assert models.status_code == 200
    assert runs.status_code == 404 and runs.json()["error"]["code"] == "store_off"
    asked = create_app(make_config(store={"url": f"sqlite:///{blocker}/runs.db"}))
    with pytest.raises(Exception, match="not-a-dir"):
        async with asgi_client(asked):
            pass
