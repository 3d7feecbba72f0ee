"""The viewer's access paths in a real headless Chromium: the key dialog under inbound auth, a failed run's error
envelope, and a server that records no runs (issue 14)."""

from __future__ import annotations

import json
import re
import socket
import urllib.parse
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI
from playwright.sync_api import Page, expect

from ..conftest import UVICORN, RemoteUpstream, run_app, run_server, sdk
from .conftest import ask, row, screenshot, wait_ready

KEY = "viewer-browser-key"


@pytest.fixture(scope="module")
def scripted(upstream_url: str) -> str:
    return upstream_url


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, scripted: str) -> Iterator[str]:
    """A server with inbound auth on, in front of the scripted upstream, recording to a SQLite store."""
    tmp = tmp_path_factory.mktemp("guarded")
    upstream = scripted
    config = {
        "auth_api_keys_env": "VIEWER_KEYS",
        "retries": 0,
        "default_api_key_env": "VIEWER_UPSTREAM_KEY",
        "served_models": {"guarded": {"mode": "direct", "api": {"model": "m", "base_url": f"{upstream}/v1"}}},
    }
    store = f"sqlite:///{tmp / 'runs.sqlite3'}"
    with run_app(tmp / "config.json", json.dumps(config), ADAPTER_CRITIC_STORE=store, VIEWER_KEYS=KEY) as (url, _):
        wait_ready(url)
        yield url


def test_the_page_asks_for_the_key_and_keeps_it_in_the_tab(guarded: str, page: Page) -> None:
    run_id, _ = ask(guarded, "guarded", "hi", key=KEY)
    page.goto(f"{guarded}/v1/ui")
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    page.fill("#key-input", "wrong-key")
    page.click("#key-submit")
    expect(page.locator("#key-error")).to_have_text("That key was refused.")
    page.fill("#key-input", KEY)
    page.click("#key-submit")
    expect(row(page, run_id)).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('adapter_critic.api_key')") == KEY
    assert page.evaluate("JSON.stringify(localStorage)").find(KEY) == -1
    assert KEY not in page.url
    # A new tab (a new session) asks again.
    other = page.context.new_page()
    other.goto(f"{guarded}/v1/ui")
    expect(other.locator("#key-dialog")).to_be_visible()
    other.close()
    page.click("#forget-key")
    expect(dialog).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('adapter_critic.api_key')") is None


def enter_key(page: Page) -> None:
    expect(page.locator("#key-dialog")).to_be_visible()
    page.fill("#key-input", KEY)
    page.click("#key-submit")
    expect(page.locator("#key-dialog")).to_be_hidden()


def test_a_failed_run_stands_out_with_its_error_envelope(guarded: str, scripted: str, page: Page) -> None:
    RemoteUpstream(scripted).reset().script({"status": 500, "body": '{"error": {"message": "the model fell over"}}'})
    client = sdk(OpenAI(base_url=f"{guarded}/v1", api_key=KEY, max_retries=0))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="guarded",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": "viewer-failed-run"},  # the client's own request id
        )
    envelope = failed.value.response.json()
    page.goto(f"{guarded}/v1/ui")
    enter_key(page)
    failed_row = page.locator("tr.run", has_text="viewer-failed-run")
    expect(failed_row).to_have_class(re.compile(r"\bstatus-row-error\b"))
    expect(failed_row.locator(".status")).to_have_text("error")
    page.fill("#search", "viewer-failed-run")
    page.press("#search", "Enter")
    expect(page.locator("#run-error h2")).to_have_text(f"Error: HTTP {failed.value.status_code}")
    assert json.loads(page.locator("#run-error pre").inner_text()) == envelope
    stage = page.locator('details.stage[data-stage="api"]')
    expect(stage.locator(".status-error")).to_have_text("failed")
    screenshot(page, "failed-run")


def test_without_a_run_store_the_page_says_how_to_turn_it_on(page: Page) -> None:
    env = {"ADAPTER_CRITIC_CONFIG": "", "ADAPTER_CRITIC_STORE": "none"}
    with run_server(UVICORN, env=env) as (url, _):
        wait_ready(url)
        page.goto(f"{url}/v1/ui")
        expect(page.locator("#load-error")).to_be_visible()
        expect(page.locator("#store-hint")).to_contain_text("store.url")


def test_a_running_run_is_followed_until_it_ends(guarded: str, scripted: str, page: Page) -> None:
    upstream = RemoteUpstream(scripted).reset()
    upstream.script({"content": "slow", "delay": 60})  # held until its caller goes away
    body = json.dumps({"model": "guarded", "messages": [{"role": "user", "content": "take your time"}]}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEY}\r\nx-request-id: viewer-slow-run\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", urllib.parse.urlsplit(guarded).port or 80)) as client:
        client.sendall(head.encode() + body)
        assert upstream.holding(count=1, wait=10) == 1
        page.goto(f"{guarded}/v1/ui")
        enter_key(page)
        slow_row = page.locator("tr.run", has_text="viewer-slow-run")
        expect(slow_row.locator(".status")).to_have_text("running")
        slow_row.click()
        status = page.locator("#run-detail dl.summary .status")
        expect(status).to_have_text("running")
        expect(page.locator("#answer")).to_contain_text("the run is still going")
    # The client went away: the run is cancelled, and the open page follows it there without a reload.
    expect(status).to_have_text("cancelled", timeout=15_000)
    expect(page.locator("#answer")).to_contain_text("No answer: the run ended cancelled.")
