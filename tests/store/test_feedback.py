"""Feedback on runs (issue 45): `POST /v1/runs/{id}/feedback` keeps scores, comments, a stage's verdict and a
corrected answer, several per run, each with its time and the named key that gave it; `GET /v1/runs/{id}` shows
them and the list counts them; a key gives feedback only on runs it may see (another key's run is a 404); bad input
is a 400 naming the field; `/metrics` counts them. Through a real uvicorn with the openai SDK, on a SQLite file and on
PostgreSQL; the command line gives feedback to the same store and exports a dataset that `adapter-critic eval`
runs."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from adapter_critic import AdapterCriticMiddleware

from ..cli.conftest import invoke
from ..conftest import RemoteUpstream, asgi_client, chat, run_app, sdk
from ..middleware_app import LocalModel, local_config
from .pgserver import execute

TEAM, OTHER, OPS = "sk-feedback-team", "sk-feedback-other", "sk-feedback-ops"


def config(upstream: str) -> str:
    api = {"model": "api-model", "base_url": f"{upstream}/v1"}
    return json.dumps(
        {
            "retries": 0,
            "default_api_key_env": "FEEDBACK_UPSTREAM_KEY",
            "served_models": {
                "team-direct": {"mode": "direct", "api": api},
                "team-critic": {"mode": "critic", "api": api, "critic": {**api, "model": "critic-model"}},
            },
            "auth": {
                "keys": [
                    {"name": "team", "key_env": "FEEDBACK_TEAM_KEY"},
                    {"name": "other", "key_env": "FEEDBACK_OTHER_KEY"},
                    {"name": "ops", "key_sha256": hashlib.sha256(OPS.encode()).hexdigest(), "admin": True},
                ]
            },
        }
    )


@pytest.fixture
def served(upstream_url: str, store_url: str, tmp_path: Path) -> Iterator[str]:
    RemoteUpstream(upstream_url).reset()
    env = {"ADAPTER_CRITIC_STORE": store_url, "FEEDBACK_TEAM_KEY": TEAM, "FEEDBACK_OTHER_KEY": OTHER}
    with run_app(tmp_path / "config.json", config(upstream_url), **env) as (url, _):
        httpx.get(f"{url}/v1/health", timeout=10).raise_for_status()
        yield url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(
    request: pytest.FixtureRequest, upstream_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One server for the tests that each make a run of their own and look only at it (the 400s): started once per
    backend, on a store of its own (on PostgreSQL its own database, which no other test empties)."""
    where = tmp_path_factory.mktemp("feedback")
    if request.param == "sqlite":
        store = f"sqlite:///{where / 'runs.sqlite3'}"
    else:
        server: str = request.getfixturevalue("pg_server")
        name = f"feedback_{os.getpid()}"
        execute(f"{server}/postgres", f'DROP DATABASE IF EXISTS "{name}"')
        execute(f"{server}/postgres", f'CREATE DATABASE "{name}"')
        store = f"{server}/{name}"
    env = {"ADAPTER_CRITIC_STORE": store, "FEEDBACK_TEAM_KEY": TEAM, "FEEDBACK_OTHER_KEY": OTHER}
    with run_app(where / "config.json", config(upstream_url), **env) as (url, _):
        httpx.get(f"{url}/v1/health", timeout=10).raise_for_status()
        yield url


def ask(url: str, key: str, model: str, content: str) -> str:
    client = sdk(OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}]).id


def headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def written(url: str, run_id: str) -> dict[str, Any]:
    """The run once the store has written it whole (it writes in the background: asked again, as an admin)."""
    for _ in range(200):
        response = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers(OPS), timeout=30)
        if response.status_code == 200 and response.json()["status"] != "running":
            body: dict[str, Any] = response.json()
            return body
        httpx.get(f"{url}/v1/health")  # the next look waits on the server, not on a sleep
    raise AssertionError(f"run {run_id} was not written")


def give(url: str, key: str, run_id: str, body: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/runs/{run_id}/feedback", json=body, headers=headers(key), timeout=30)


def test_feedback_is_kept_shown_counted_and_kept_to_the_runs_a_key_sees(served: str) -> None:
    url = served
    run_id = ask(url, TEAM, "team-critic", "What is 2 + 2?")
    ops_run = ask(url, OPS, "team-direct", "ops asks")
    run = written(url, run_id)
    written(url, ops_run)
    assert [stage["stage"] for stage in run["stages"]] == ["api_draft", "critic", "api_final"]
    assert run["feedback"] == [] and run["feedback_count"] == 0

    up = give(url, TEAM, run_id, {"score": 1, "label": "helpful", "comment": "Right answer."})
    assert up.status_code == 201, up.text
    kept = up.json()
    assert kept["object"] == "run.feedback" and kept["id"].startswith("fb_")
    assert (kept["run_id"], kept["score"], kept["label"], kept["comment"]) == (run_id, 1.0, "helpful", "Right answer.")
    assert (kept["key_name"], kept["via"], kept["verdict"], kept["stage"]) == ("team", "api", None, None)
    critique = give(url, TEAM, run_id, {"score": -1, "stage": "critic", "verdict": "reject", "corrected_answer": "4"})
    assert critique.status_code == 201, critique.text
    assert (critique.json()["stage"], critique.json()["stage_index"]) == ("critic", 1)

    detail = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers(TEAM), timeout=30).json()
    assert [entry["id"] for entry in detail["feedback"]] == [kept["id"], critique.json()["id"]]
    assert detail["feedback"][1]["verdict"] == "reject" and detail["feedback"][1]["corrected_answer"] == "4"
    assert all(entry["created_at"].endswith("Z") and entry["key_name"] == "team" for entry in detail["feedback"])
    assert detail["feedback_count"] == 2
    listed = httpx.get(f"{url}/v1/runs", headers=headers(OPS), timeout=30).json()["data"]
    assert {run["id"]: run["feedback_count"] for run in listed} == {run_id: 2, ops_run: 0}
    with_feedback = httpx.get(f"{url}/v1/runs", params={"has_feedback": "true"}, headers=headers(OPS), timeout=30)
    assert [run["id"] for run in with_feedback.json()["data"]] == [run_id]

    # Tenancy: team may not give feedback on ops's run, nor other on team's: a 404 like an unknown run.
    for key, target in ((TEAM, ops_run), (OTHER, run_id)):
        refused = give(url, key, target, {"score": 1})
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "run_not_found"
        assert give(url, key, "chatcmpl-unknown", {"score": 1}).json()["error"]["message"] == refused.json()["error"][
            "message"
        ].replace(target, "chatcmpl-unknown")
    assert httpx.post(f"{url}/v1/runs/{run_id}/feedback", json={"score": 1}, timeout=30).status_code == 401
    admin = give(url, OPS, run_id, {"score": 0.5})  # an admin sees every run, so it may judge it
    assert admin.status_code == 201 and admin.json()["key_name"] == "ops"
    assert len(written(url, run_id)["feedback"]) == 3

    metrics = httpx.get(f"{url}/metrics", headers=headers(OPS), timeout=30).text
    assert 'adapter_critic_feedback_total{served_model="team-critic",verdict="positive"} 2.0' in metrics
    assert 'adapter_critic_feedback_total{served_model="team-critic",verdict="reject"} 1.0' in metrics


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"score": 2}, "score", "from -1 (bad) to 1 (good)"),
        ({"score": "good"}, "score", "`score` must be a number from -1"),
        ({"comment": "no score"}, "score", "`score` is required"),
        ({"score": 1, "rating": 5}, "rating", "Unknown field 'rating'; the fields are score, label"),
        ({"score": 1, "verdict": "accept"}, "stage", "give `stage`"),
        ({"score": 1, "stage": "critic"}, "verdict", "goes with a `verdict`"),
        ({"score": 1, "stage": "critic", "verdict": "maybe"}, "verdict", "`verdict` must be accept or reject"),
        ({"score": 1, "stage": "judge", "verdict": "accept"}, "stage", "has no stage 'judge'; its stages are api"),
        ([1], None, "The body must be a JSON object"),
    ],
)
def test_bad_feedback_is_a_400_that_says_what_to_change(shared: str, body: Any, param: str | None, says: str) -> None:
    served = shared
    run_id = ask(served, TEAM, "team-direct", "Hello")
    written(served, run_id)
    response = give(served, TEAM, run_id, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert says in error["message"]
    assert written(served, run_id)["feedback"] == []


def test_not_json_and_wrong_methods(shared: str) -> None:
    served = shared
    run_id = ask(served, TEAM, "team-direct", "Hello")
    written(served, run_id)
    not_json = httpx.post(f"{served}/v1/runs/{run_id}/feedback", content=b"score=1", headers=headers(TEAM), timeout=30)
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]
    get = httpx.get(f"{served}/v1/runs/{run_id}/feedback", headers=headers(TEAM), timeout=30)
    assert get.status_code == 405 and "use POST" in get.json()["error"]["message"]
    post = httpx.post(f"{served}/v1/runs/{run_id}", json={"score": 1}, headers=headers(TEAM), timeout=30)
    assert post.status_code == 405


def test_the_command_line_gives_feedback_and_exports_a_dataset_eval_runs(
    served: str, store_url: str, upstream_url: str, tmp_path: Path
) -> None:
    url = served
    corrected = ask(url, TEAM, "team-direct", "What is the capital of France?")
    accepted = ask(url, TEAM, "team-direct", "Repeat: hello")
    rejected = ask(url, TEAM, "team-direct", "Say something wrong")
    untouched = ask(url, TEAM, "team-direct", "No feedback on me")
    for run_id in (corrected, accepted, rejected, untouched):
        written(url, run_id)
    store = ["--store", store_url]

    given = invoke("runs", "feedback", corrected, *store, "--score", "-1", "--corrected-answer", "Paris")
    assert given.exit_code == 0, given.output + given.stderr
    assert invoke("runs", "feedback", accepted, *store, "--score", "1", "--comment", "good").exit_code == 0
    assert invoke("runs", "feedback", rejected, *store, "--score", "-1", "--label", "wrong").exit_code == 0
    bad = invoke("runs", "feedback", accepted, *store, "--score", "3")
    assert bad.exit_code != 0 and "from -1 (bad) to 1 (good)" in bad.stderr
    unknown = invoke("runs", "feedback", "chatcmpl-nope", *store, "--score", "1")
    assert unknown.exit_code != 0 and "no run 'chatcmpl-nope'" in unknown.stderr
    stage = invoke("runs", "feedback", accepted, *store, "--score", "1", "--stage", "critic", "--accept")
    assert stage.exit_code != 0 and "has no stage 'critic'; its stages are api" in stage.stderr

    cli_entry = written(url, corrected)["feedback"][0]
    assert (cli_entry["via"], cli_entry["key_name"], cli_entry["corrected_answer"]) == ("cli", None, "Paris")

    dataset = tmp_path / "feedback.jsonl"
    exported = invoke("runs", "export", *store, "--as-dataset", str(dataset))
    assert exported.exit_code == 0, exported.output + exported.stderr
    assert (
        "2 items written" in exported.stderr
        and "1 run with feedback left out: 1 no corrected answer" in exported.stderr
    )
    lines = [json.loads(line) for line in dataset.read_text().splitlines()]
    by_run = {line["metadata"]["run_id"]: line for line in lines}
    assert set(by_run) == {corrected, accepted}
    assert by_run[corrected]["expected"] == "Paris" and by_run[corrected]["metadata"]["source"] == "corrected"
    assert by_run[accepted]["expected"] == "echo api-model: Repeat: hello"
    assert by_run[accepted]["messages"] == [{"role": "user", "content": "Repeat: hello"}]

    # `adapter-critic eval` reads the exported file: the accepted answer scores, the corrected one does not (yet).
    out = tmp_path / "eval"
    evaluated = invoke(
        "eval", str(dataset), "--base-url", f"{url}/v1", "--api-key-env", "FEEDBACK_EVAL_KEY", "--models",
        "team-direct", "--scorer", "exact", "--output-dir", str(out), env={"FEEDBACK_EVAL_KEY": TEAM},
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output + evaluated.stderr
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    scores = {result["id"]: result["score"] for result in results}
    assert scores == {by_run[accepted]["id"]: 1.0, by_run[corrected]["id"]: 0.0}


@pytest.mark.anyio
async def test_feedback_beside_the_middleware_and_other_posts_still_reach_the_wrapped_app(tmp_path: Path) -> None:
    keys = [
        {"name": "team", "key_sha256": hashlib.sha256(TEAM.encode()).hexdigest()},
        {"name": "ops", "key_sha256": hashlib.sha256(OPS.encode()).hexdigest(), "admin": True},
    ]
    config = local_config(store={"url": f"sqlite:///{tmp_path / 'runs.db'}"}, auth={"keys": keys})
    app = AdapterCriticMiddleware(LocalModel().app, config=config)
    async with asgi_client(app) as client:
        team_run = (await client.post("/v1/chat/completions", json=chat("local-adapter"), headers=headers(TEAM))).json()
        ops_run = (await client.post("/v1/chat/completions", json=chat("local-adapter"), headers=headers(OPS))).json()
        await app.service.store.flush()  # type: ignore[union-attr]
        kept = await client.post(f"/v1/runs/{team_run['id']}/feedback", json={"score": 1}, headers=headers(TEAM))
        hidden = await client.post(f"/v1/runs/{ops_run['id']}/feedback", json={"score": 1}, headers=headers(TEAM))
        detail = (await client.get(f"/v1/runs/{team_run['id']}", headers=headers(TEAM))).json()
        other = await client.post("/v1/embeddings", json={"input": "x"})  # not ours: the wrapped app answers it
    assert kept.status_code == 201 and kept.json()["key_name"] == "team"
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "run_not_found"
    assert [entry["id"] for entry in detail["feedback"]] == [kept.json()["id"]]
    assert other.status_code == 200  # the wrapped app answered it, without our key
