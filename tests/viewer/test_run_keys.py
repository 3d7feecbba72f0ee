"""The viewer in a real headless Chromium under named keys (issue 43): it shows each run's key, and only the runs the
key it was given may see — a key that is not admin its own, another key's run not found; an admin key every run.

The server under test calls the demo server as its upstream and records to a SQLite store; requests go through the
official `openai` SDK."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ..conftest import run_app
from .conftest import ask, row, wait_ready

TEAM, OPS = "sk-viewer-team", "sk-viewer-ops"


@pytest.fixture(scope="module")
def keyed(demo: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder: Path = tmp_path_factory.mktemp("keyed")
    toml = (
        f'[served_models.team-direct]\nmode = "direct"\napi = {{ model = "demo-direct", base_url = "{demo}/v1" }}\n\n'
        '[[auth.keys]]\nname = "team"\nkey_env = "VIEWER_TEAM_KEY"\n\n'
        f'[[auth.keys]]\nname = "ops"\nkey_sha256 = "{hashlib.sha256(OPS.encode()).hexdigest()}"\nadmin = true\n'
    )
    store = f"sqlite:///{folder / 'runs.sqlite3'}"
    with run_app(folder / "config.toml", toml, ADAPTER_CRITIC_STORE=store, VIEWER_TEAM_KEY=TEAM) as (url, _):
        wait_ready(url)
        yield url


def enter(page: Page, key: str) -> None:
    expect(page.locator("#key-dialog")).to_be_visible()
    page.fill("#key-input", key)
    page.click("#key-submit")
    expect(page.locator("#key-dialog")).to_be_hidden()


def test_a_key_sees_its_own_runs_each_with_its_key(keyed: str, page: Page) -> None:
    ops_run, _ = ask(keyed, "team-direct", "ops asks first", key=OPS)
    team_run, _ = ask(keyed, "team-direct", "team asks next", key=TEAM)  # written after ops's run

    page.goto(f"{keyed}/v1/ui")
    enter(page, TEAM)
    expect(row(page, team_run).locator("td.key")).to_have_text("team")
    expect(row(page, ops_run)).to_have_count(0)
    row(page, team_run).click()
    expect(page.locator("#run-key")).to_have_text("team")

    page.goto(f"{keyed}/v1/ui#/runs/{ops_run}")
    expect(page.locator("#run-not-found")).to_be_visible()

    page.goto(f"{keyed}/v1/ui#/runs")
    page.click("#forget-key")
    enter(page, OPS)
    expect(row(page, ops_run).locator("td.key")).to_have_text("ops")
    expect(row(page, team_run).locator("td.key")).to_have_text("team")
    page.goto(f"{keyed}/v1/ui#/runs/{ops_run}")
    expect(page.locator("#run-key")).to_have_text("ops")
