"""The viewer shows what runs cost (docs/guides/cost.md), in a real headless Chromium over a real uvicorn with a price
table, its upstream the scripted server, its runs made through the official `openai` SDK: per run in the list,
per stage and in total in a run, and in the compare view; a server without prices shows no cost column."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ..conftest import RemoteUpstream, run_app
from ..helpers import usage
from .conftest import ask, row, screenshot, wait_ready

USAGE = usage(1000, 100)  # 0.0028 EUR at api-model's price


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
retries = 0
[pricing]
currency = "EUR"
[prices."api-model"]
input = 2.0
output = 8.0

[served_models.p-direct]
mode = "direct"
api = {{ model = "api-model", base_url = "{up}" }}

[served_models.p-critic]
mode = "critic"
api = {{ model = "api-model", base_url = "{up}" }}
critic = {{ model = "unpriced-model", base_url = "{up}" }}
"""


@pytest.fixture(scope="module")
def upstream(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url)


@pytest.fixture(scope="module")
def priced(upstream: RemoteUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server with prices, recording to a SQLite store of its own; yields its base URL."""
    directory: Path = tmp_path_factory.mktemp("priced")
    env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{directory / 'runs.sqlite3'}", "OPENAI_API_KEY": ""}
    with run_app(directory / "config.toml", config_toml(upstream.url), **env) as (url, _):
        wait_ready(url)
        yield url


def test_cost_per_run_per_stage_and_compared(priced: str, upstream: RemoteUpstream, page: Page) -> None:
    upstream.reset().script(*({"model": "api-model", "usage": USAGE} for _ in range(3)))
    direct_id, _ = ask(priced, "p-direct", "What does it cost?")
    critic_id, critic = ask(priced, "p-critic", "What does it cost?")
    assert critic["adapter_critic"]["cost"]["unknown_stages"] == ["critic"]

    page.goto(f"{priced}/v1/ui")
    expect(page.locator("th.cost")).to_be_visible()
    expect(row(page, direct_id).locator("td.cost")).to_have_text("0.0028 EUR")
    critic_cost = row(page, critic_id).locator("td.cost")
    expect(critic_cost).to_have_text("≥ 0.0056 EUR")  # the critic's model has no price: a lower bound
    expect(critic_cost).to_have_attribute("title", re.compile(r"^Unknown for critic"))
    screenshot(page, "runs-list-cost")

    row(page, critic_id).click()
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", critic_id)
    expect(page.locator("#run-cost")).to_have_text("≥ 0.0056 EUR")
    summaries = page.locator("#stages details.stage > summary")
    expect(summaries.nth(0)).to_contain_text("· 0.0028 EUR")
    expect(summaries.nth(1)).to_contain_text("· unknown")
    costs = page.locator("#tokens tbody td.cost")
    expect(costs).to_have_text(["0.0028 EUR", "unknown", "0.0028 EUR", "≥ 0.0056 EUR"])
    expect(page.locator("#tokens thead th").nth(4)).to_have_text("Cost")
    screenshot(page, "run-detail-cost")

    page.goto(f"{priced}/v1/ui#/compare/{critic_id}/{direct_id}")
    expect(page.locator('.side[data-side="A"] dd.cost')).to_have_text("≥ 0.0056 EUR")
    expect(page.locator('.side[data-side="B"] dd.cost')).to_have_text("0.0028 EUR")
    screenshot(page, "compare-cost")


def test_a_server_without_prices_shows_no_cost(demo: str, page: Page) -> None:
    run_id, completion = ask(demo, "demo-critic", "Is it free?")
    assert "cost" not in completion["adapter_critic"]
    page.goto(f"{demo}/v1/ui")
    expect(row(page, run_id)).to_be_visible()
    expect(page.locator("th.cost")).to_be_hidden()
    expect(row(page, run_id).locator("td.cost")).to_be_hidden()
    page.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(page.locator("#tokens")).to_be_visible()
    expect(page.locator("#run-cost")).to_have_count(0)
    expect(page.locator("#tokens td.cost")).to_have_count(0)
