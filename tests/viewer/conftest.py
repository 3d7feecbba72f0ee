"""The viewer's browser tests' fixtures: a real headless Chromium — the distribution's package (`apt-get install
chromium`), driven by Playwright with that browser's path, never a browser build downloaded by a tool —, a tab that
fails the test on a CSP violation or a script error, and the demo server recording to a SQLite store in a temp dir.

Without a Chromium the browser tests are skipped with the reason, except under `CI=true`, where a skip would hide
a missing check: there they fail (`.ci/run` installs the package when it is missing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, expect, sync_playwright

from ..conftest import UVICORN, run_app, run_server, sdk, unavailable

ROOT = Path(__file__).parents[2]
# Screenshots of every browser test, for a person (or a CI job's artifacts) to look at; ignored by git.
ARTIFACTS = Path(os.environ.get("ADAPTER_CRITIC_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "viewer"
# How long a wait on the page may take before it fails: generous, for a loaded machine (a bound, not a sleep).
expect.set_options(timeout=20_000)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str:
    """The system Chromium's executable (`CHROMIUM` overrides), or skip — fail under CI — saying what is missing."""
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CANDIDATES)), None)
    if found:
        return found
    unavailable("no Chromium on this machine: apt-get install chromium (or set CHROMIUM to its path)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root (in a container), where Chromium's sandbox cannot start.
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def wait_ready(url: str) -> None:
    with httpx.Client(timeout=10) as client:
        client.get(f"{url}/v1/health").raise_for_status()  # the listening socket queues us until the app is up


@contextlib.contextmanager
def serving(folder: Path, toml: str) -> Iterator[str]:
    """The server of `toml` (a config in `folder`) recording to a SQLite store there, ready; yields its base URL."""
    with run_app(folder / "config.toml", toml, ADAPTER_CRITIC_STORE=f"sqlite:///{folder}/r.db") as (url, _):
        wait_ready(url)
        yield url


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo server recording to a SQLite store of its own; yields its base URL."""
    store = tmp_path_factory.mktemp("store") / "runs.sqlite3"
    env = {"ADAPTER_CRITIC_CONFIG": "", "ADAPTER_CRITIC_STORE": f"sqlite:///{store}"}
    with run_server(UVICORN, env=env) as (url, _):
        wait_ready(url)
        yield url


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab that records what the browser refused or failed at (CSP violations, script errors)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"script error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            problems.append(message.text)

    tab.on("console", on_console)
    yield tab
    context.close()
    assert problems == []


def ask(url: str, model: str, content: str, key: str = "unused") -> tuple[str, dict[str, Any]]:
    """One chat completion through the openai SDK: its run id (`adapter_critic.run_id`) and the completion."""
    client = sdk(OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    completion = client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}])
    body = completion.model_dump()
    run_id: str = body["adapter_critic"]["run_id"]
    stored(url, run_id, key)
    return run_id, body


def stored(url: str, run_id: str, key: str = "unused") -> None:
    """Wait until the run is in the store (its writer process writes it after the answer, and on a loaded machine
    may do so seconds later), so a page loaded next lists it."""
    headers = {"authorization": f"Bearer {key}"}
    for _ in range(2000):
        if httpx.get(f"{url}/v1/runs/{run_id}", headers=headers, timeout=30).status_code == 200:
            return
        httpx.get(f"{url}/v1/health", timeout=30)  # the next look waits on the server, not on a sleep
    raise AssertionError(f"run {run_id} was not stored")


def row(page: Page, run_id: str) -> Locator:
    return page.locator(f'tr.run[data-id="{run_id}"]')
