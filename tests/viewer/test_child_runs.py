"""The viewer in a real headless Chromium over a run whose stage was another served model's run: the parent links to
its child run (from the stage and from its list of child runs), the child links back, and the list marks it.

The server under test calls the demo server as its upstream (as it would call a model server), recording to a
SQLite store of its own; runs are made through the official `openai` SDK."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import ask, row, screenshot, serving


@pytest.fixture(scope="module")
def composed(demo: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose `outer` critic's critique is the `inner` critic's whole run, every call on the demo server."""
    folder: Path = tmp_path_factory.mktemp("composed")
    target = f'{{ model = "demo-direct", base_url = "{demo}/v1" }}'
    toml = (
        f'[served_models.inner]\nmode = "critic"\napi = {target}\n\n'
        f'[served_models.outer]\nmode = "critic"\napi = {target}\ncritic = {{ served = "inner" }}\n'
    )
    with serving(folder, toml) as url:
        yield url


def test_a_parent_and_its_child_run_link_to_each_other(composed: str, page: Page) -> None:
    run_id, body = ask(composed, "outer", "Is 91 prime?")
    [child] = body["adapter_critic"]["nested"]["critic"]
    page.goto(f"{composed}/v1/ui#/runs/{run_id}")

    children = page.locator("#children tr[data-child]")
    expect(children).to_have_count(1)
    expect(children.first.locator("td").first).to_have_text("critic")
    expect(children.first.locator("a")).to_have_text(child["run_id"])
    critic_stage = page.locator('details.stage[data-stage="critic"]')
    critic_stage.locator("summary").click()
    expect(critic_stage.locator(".child-run a")).to_have_text(f"run {child['run_id']}")
    screenshot(page, "run-detail-with-child-run", full_page=True)

    critic_stage.locator(".child-run a").click()
    expect(page).to_have_url(re.compile(rf"#/runs/{re.escape(child['run_id'])}$"))
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", child["run_id"])
    parent = page.locator("#parent-run")
    expect(parent).to_have_text(run_id)
    expect(page.locator("#answer pre")).to_have_text(body["adapter_critic"]["intermediate"]["critic"])

    parent.click()
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", run_id)
    page.goto(f"{composed}/v1/ui#/runs")
    expect(row(page, child["run_id"]).locator(".child-of")).to_have_text(" ↳ critic")
    expect(row(page, run_id).locator(".child-of")).to_have_count(0)
