"""The viewer in a real headless Chromium over a cache hit: the hit's run links to the run whose answer it gave, and
the list marks it.

The server under test calls the demo server as its upstream, with `cache = true` on its served model and a SQLite
store of its own (where the cache keeps its answers); requests go through the official `openai` SDK."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from playwright.sync_api import Page, expect

from ..conftest import sdk
from .conftest import row, serving


@pytest.fixture(scope="module")
def caching(demo: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder: Path = tmp_path_factory.mktemp("caching")
    toml = (
        f'[served_models.cached]\nmode = "direct"\ncache = true\n'
        f'api = {{ model = "demo-direct", base_url = "{demo}/v1" }}\n'
    )
    with serving(folder, toml) as url:
        yield url


def ask_cached(url: str, content: str) -> tuple[str, dict[str, Any]]:
    """A request at temperature 0 (so the cache is looked up): the cache header and the extension."""
    client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
    raw = client.chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": content}], temperature=0
    )
    extension: dict[str, Any] = raw.parse().model_dump()["adapter_critic"]
    return raw.headers["x-adapter-critic-cache"], extension


def test_a_cache_hit_links_to_the_run_it_came_from(caching: str, page: Page) -> None:
    first, original = ask_cached(caching, "Name a prime above 90.")
    again, hit = ask_cached(caching, "Name a prime above 90.")
    assert (first, again) == ("miss", "hit")
    assert hit["cache"]["run_id"] == original["run_id"] != hit["run_id"]

    page.goto(f"{caching}/v1/ui#/runs/{hit['run_id']}")
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", hit["run_id"])
    source = page.locator("#cached-from")
    expect(source).to_have_text(original["run_id"])
    source.click()
    expect(page).to_have_url(re.compile(rf"#/runs/{re.escape(original['run_id'])}$"))
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", original["run_id"])
    expect(page.locator("#cached-from")).to_have_count(0)

    page.goto(f"{caching}/v1/ui#/runs")
    expect(row(page, hit["run_id"]).locator(".cache-hit")).to_have_text(" ↺ cache")
    expect(row(page, original["run_id"]).locator(".cache-hit")).to_have_count(0)
