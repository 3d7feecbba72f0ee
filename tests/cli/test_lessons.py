"""Reviewers that learn (issue 45): feedback given through a real uvicorn's runs API becomes lessons
(`adapter-critic lessons learn`), checked on held-out items before the server's runs use them; the same server's
next run carries them in its critic's prompt and says which version it used; rollback takes them away again; a
version that makes the held-out items worse is not activated. The versions are kept on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from adapter_critic.learning.distill import LEARNER_SYSTEM_PROMPT
from adapter_critic.workflows.prompts import LESSONS_LEAD, SECOND_PASS_INSTRUCTION

from ..conftest import RemoteUpstream, run_app, sdk
from .conftest import invoke, one_error_line, write_jsonl

ENDING = "Checked by a human reviewer."


def demo_config(holdout: Path) -> str:
    """The demo model, named in a config file: a critic that learns, the plain demo model its learner."""
    return f"""
[served_models.demo-direct]
mode = "direct"
api = {{ model = "adapter-critic-demo-model", base_url = "/demo/v1" }}

[served_models.careful]
mode = "critic"
api = {{ model = "adapter-critic-demo-model", base_url = "/demo/v1" }}
learning = {{ learner = "demo-direct", holdout = "{holdout}" }}
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    holdout = write_jsonl(
        tmp_path / "holdout.jsonl",
        *({"prompt": q, "expected": ENDING, "scorer": "contains"} for q in ("Is it ready?", "Did it pass?", "Paid?")),
    )
    env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}
    with run_app(tmp_path / "config.toml", demo_config(holdout), **env) as (url, _):
        yield url, tmp_path / "config.toml", env


def ask(url: str, content: str) -> Any:
    client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
    return client.chat.completions.create(model="careful", messages=[{"role": "user", "content": content}])


def written(url: str, run_id: str) -> dict[str, Any]:
    for _ in range(200):
        response = httpx.get(f"{url}/v1/runs/{run_id}", timeout=30)
        if response.status_code == 200 and response.json()["status"] != "running":
            body: dict[str, Any] = response.json()
            return body
        httpx.get(f"{url}/v1/health")  # the next look waits on the server, not on a sleep
    raise AssertionError(f"run {run_id} was not written")


def test_feedback_becomes_lessons_the_running_server_uses_until_rolled_back(
    served: tuple[str, Path, dict[str, str]],
) -> None:
    url, config, env = served
    for question in ("Is the draft final?", "Was the budget approved?"):
        reply = ask(url, question)
        assert ENDING not in (reply.choices[0].message.content or "")
        written(url, reply.id)
        corrected = {"score": -1, "corrected_answer": f"Not yet.\n{ENDING}"}
        assert httpx.post(f"{url}/v1/runs/{reply.id}/feedback", json=corrected, timeout=30).status_code == 201

    learnt = invoke("lessons", "learn", "careful", "-c", str(config), env=env)
    assert learnt.exit_code == 0, learnt.stderr
    assert f"End the answer with: {ENDING}" in learnt.stdout
    assert "version 1 active, on 3 held-out items: 0.000 -> 1.000" in learnt.stdout

    after = ask(url, "Is the plan agreed?")  # the same server process: it reads the active version per run
    assert (after.choices[0].message.content or "").endswith(ENDING)
    extension = after.model_extra["adapter_critic"] if after.model_extra else {}
    assert extension["intermediate"]["lessons_version"] == 1
    run = written(url, after.id)
    assert run["intermediate"]["lessons_version"] == 1
    critic = next(stage for stage in run["stages"] if stage["stage"] == "critic")
    assert LESSONS_LEAD in critic["messages"][0]["content"] and ENDING in critic["messages"][0]["content"]

    listed = invoke("lessons", "list", "careful", "-c", str(config), env=env)
    assert "active" in listed.stdout and "0.000 -> 1.000" in listed.stdout
    shown = invoke("lessons", "show", "careful", "-c", str(config), env=env)
    assert f"+ End the answer with: {ENDING}" in shown.stdout

    rolled = invoke("lessons", "rollback", "careful", "-c", str(config), env=env)
    assert rolled.exit_code == 0 and "runs without lessons" in rolled.stdout
    plain = ask(url, "Is the plan agreed?")
    assert ENDING not in (plain.choices[0].message.content or "")
    assert "lessons_version" not in (plain.model_extra or {})["adapter_critic"]["intermediate"]

    forced = invoke("lessons", "activate", "careful", "1", "-c", str(config), env=env)
    assert forced.exit_code == 0 and "version 1 active, on 3 held-out items" in forced.stdout
    assert (ask(url, "Is it done?").choices[0].message.content or "").endswith(ENDING)


def test_a_version_that_makes_the_held_out_items_worse_is_not_activated(
    tmp_path: Path, remote: RemoteUpstream, upstream_url: str
) -> None:
    """The learner writes "Answer in French."; a critic told so asks for French, and the revision in French no
    longer contains the expected "42": the check finds it worse, and no version becomes active."""
    remote.reset()
    revise = SECOND_PASS_INSTRUCTION.partition("{critique}")[0].strip()
    remote.script(
        {"content": "- Answer in French.", "match": LEARNER_SYSTEM_PROMPT[:40], "keep": True},
        {"content": "Rewrite it in French.", "match": "- Answer in French.", "keep": True},
        {"content": "Quarante-deux.", "match": "Rewrite it in French", "keep": True},
        {"content": "Fine as it is.", "match": revise, "keep": False},
        {"content": "The answer is 42.", "keep": True},
    )
    holdout = write_jsonl(tmp_path / "h.jsonl", *({"prompt": f"6 * 7? ({i})", "expected": "42"} for i in range(3)))
    api = f'{{ model = "m", base_url = "{upstream_url}/v1" }}'
    config = tmp_path / "config.toml"
    config.write_text(
        f'[served_models.plain]\nmode = "direct"\napi = {api}\n'
        f'[served_models.careful]\nmode = "critic"\napi = {api}\n'
        f'learning = {{ learner = "plain", holdout = "{holdout}" }}\n',
        encoding="utf-8",
    )
    env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}
    ran = invoke("eval", str(holdout), "-c", str(config), "-m", "careful", "-o", str(tmp_path / "e"), env=env)
    assert ran.exit_code == 0, ran.stderr
    run_id = json.loads((tmp_path / "e" / "results.jsonl").read_text().splitlines()[0])["run_id"]
    assert invoke("runs", "feedback", run_id, "--score", "-1", "--comment", "Too terse.", env=env).exit_code == 0

    learnt = invoke("lessons", "learn", "careful", "-c", str(config), env=env)
    assert learnt.exit_code == 0, learnt.stderr
    assert "version 1 rejected: worse than the lessons in use, on 3 held-out items: 1.000 -> 0.000" in learnt.stdout
    listed = invoke("lessons", "list", "careful", "-c", str(config), env=env)
    assert "rejected" in listed.stdout and "active" not in listed.stdout
    refused = invoke("lessons", "activate", "careful", "1", "-c", str(config), env=env)
    assert "worse than the lessons in use" in one_error_line(refused)


def test_mistakes_are_one_line(tmp_path: Path) -> None:
    assert "does not learn" in one_error_line(invoke("lessons", "learn", "demo-critic"))
    assert "is no served model" in one_error_line(invoke("lessons", "list", "nope"))


def test_a_key_reads_the_lessons_of_its_own_models_only(tmp_path: Path) -> None:
    """Named keys: `team` may use `careful`, `other` only `demo-direct`; another key's model's lessons are a 404
    as an unknown model is, naming only its own models."""
    holdout = write_jsonl(tmp_path / "h.jsonl", {"prompt": "Ready?", "expected": ENDING, "scorer": "contains"})
    keys = (
        '\n[[auth.keys]]\nname = "team"\nkey_env = "LESSONS_TEAM_KEY"\nmodels = ["careful"]\n'
        '\n[[auth.keys]]\nname = "other"\nkey_env = "LESSONS_OTHER_KEY"\nmodels = ["demo-direct"]\n'
    )
    env = {
        "ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'runs.sqlite3'}",
        "LESSONS_TEAM_KEY": "sk-lessons-team",
        "LESSONS_OTHER_KEY": "sk-lessons-other",
    }
    with run_app(tmp_path / "config.toml", demo_config(holdout) + keys, **env) as (url, _):
        own = httpx.get(f"{url}/v1/lessons/careful", headers={"authorization": "Bearer sk-lessons-team"}, timeout=30)
        assert own.status_code == 200 and own.json() == {"object": "list", "served_model": "careful", "data": []}
        other = httpx.get(f"{url}/v1/lessons/careful", headers={"authorization": "Bearer sk-lessons-other"}, timeout=30)
        assert other.status_code == 404 and other.json()["error"]["message"].endswith("Served models: demo-direct.")
        assert httpx.get(f"{url}/v1/lessons/careful", timeout=30).status_code == 401
