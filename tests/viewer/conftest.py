"""A real headless Chromium for the viewer's tests: the distribution's package (`apt-get install chromium`), driven by
Playwright with that browser's path — never a browser build downloaded by a tool.

Without a Chromium the browser tests are skipped with the reason, except under `CI=true`, where a skip would hide
a missing check: there they fail (`.ci/run` installs the package when it is missing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

ROOT = Path(__file__).parents[2]
# Screenshots of every browser test, for a person (or a CI job's artifacts) to look at; ignored by git.
ARTIFACTS = Path(os.environ.get("ADAPTER_CRITIC_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "viewer"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str:
    """The system Chromium's executable (`CHROMIUM` overrides), or skip — fail under CI — saying what is missing."""
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CANDIDATES)), None)
    if found:
        return found
    reason = "no Chromium on this machine: apt-get install chromium (or set CHROMIUM to its path)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI the browser tests must run")
    pytest.skip(reason)


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
