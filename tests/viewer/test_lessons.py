"""Lessons in the viewer, in a real headless Chromium (issue 45): the page of a run that used lessons says which
version, and lists every version of its served model's lessons — what each added and dropped, its status, what its
check found — with the one the run used marked; the lessons API it reads keeps to a key's models. The server serves
examples/learning.toml (the demo model) recording to a SQLite store; the versions are learnt with the command
line from feedback given through the runs API."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from ..cli.conftest import SCRIPT, script_env
from .conftest import ask, screenshot, serving

ROOT = Path(__file__).parents[2]
ENDING = "Checked by a human reviewer."


def test_a_run_that_used_lessons_shows_every_version_and_what_changed(tmp_path: Path, page: Page) -> None:
    holdout = tmp_path / "holdout.jsonl"
    holdout.write_text(json.dumps({"prompt": "Ready?", "expected": ENDING, "scorer": "contains"}) + "\n")
    toml = (ROOT / "examples" / "learning.toml").read_text(encoding="utf-8")
    toml = toml.replace("examples/eval/learning-holdout.jsonl", str(holdout))
    with serving(tmp_path, toml) as url:
        env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path}/r.db"}
        config = str(tmp_path / "config.toml")
        run_id, _ = ask(url, "careful", "Is the draft final?")
        for _ in range(200):  # the run once written (the store writes in the background)
            if httpx.get(f"{url}/v1/runs/{run_id}", timeout=30).status_code == 200:
                break
            httpx.get(f"{url}/v1/health")
        corrected = {"score": -1, "corrected_answer": f"Not yet.\n{ENDING}"}
        assert httpx.post(f"{url}/v1/runs/{run_id}/feedback", json=corrected, timeout=30).status_code == 201
        # The installed command in a process of its own (this test's thread runs the browser's event loop).
        command = [str(SCRIPT), "lessons", "learn", "careful", "-c", config]
        learnt = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**script_env(), **env})
        assert learnt.returncode == 0 and "version 1 active" in learnt.stdout, learnt.stderr

        used, body = ask(url, "careful", "Is the plan agreed?")
        assert body["adapter_critic"]["intermediate"]["lessons_version"] == 1
        page.goto(f"{url}/v1/ui#/runs/{used}")
        expect(page.locator("#lessons h2")).to_have_text("Lessons: version 1")
        version = page.locator('li.lessons-version[data-version="1"]')
        expect(version).to_contain_text("active")
        expect(version.locator("#lessons-used")).to_have_text("used by this run")
        expect(version.locator("li.added")).to_have_text(f"+ End the answer with: {ENDING}")
        expect(version).to_contain_text("Checked on 1 held-out items: 0.000 → 1.000")
        screenshot(page, "lessons")

        listed = httpx.get(f"{url}/v1/lessons/careful", timeout=30).json()
        assert [v["version"] for v in listed["data"]] == [1] and listed["data"][0]["added"] == listed["data"][0][
            "lessons"
        ]
        unknown = httpx.get(f"{url}/v1/lessons/demo-direct", timeout=30)
        assert unknown.status_code == 404 and "does not learn" in unknown.json()["error"]["message"]

        plain, _ = ask(url, "demo-direct", "Hello")
        page.goto(f"{url}/v1/ui#/runs/{plain}")
        expect(page.locator("#run-detail")).to_have_attribute("data-run-id", plain)  # its page, once written
        expect(page.locator("#answer")).to_be_visible()
        expect(page.locator("#lessons")).to_have_count(0)  # a run without lessons has no such section
