"""Moving around inside the viewer in a real headless Chromium over the real demo server: to a run id the store
does not have, and out of the compare view from the keyboard.

The page's timers run on Playwright's fake clock where a test must know what they would do: time is moved on
explicitly (`clock.run_for`), so a retry or a poll is seen, or not, without waiting for it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from playwright.sync_api import Page, expect

from .conftest import ask, row

UNKNOWN = "chatcmpl-00000000000000000000000000000000"


def test_an_unknown_run_is_not_found_at_once_and_not_asked_for_again(demo: str, page: Page) -> None:
    run_id, _ = ask(demo, "demo-critic", "Which run is this?")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url.rpartition("/runs/")[2]))
    page.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", run_id)
    page.clock.install()
    page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))  # from here timers fire only when time is moved on

    def all_asked() -> list[str]:
        """Every request so far, once the page's time has moved a minute on: a retry or a poll would be among them."""
        page.clock.run_for(60_000)
        with page.expect_request(re.compile(r"/v1/health$")):  # a later request: every earlier one has been seen
            page.evaluate("fetch(document.querySelector('meta[name=adapter-critic-root]').content + '/health')")
        return asked

    page.evaluate(f"location.hash = '#/runs/{UNKNOWN}'")  # inside the page, from one run to another id
    # Said on the first answer, with no time passing: not after a round of retries, and not the previous run.
    expect(page.locator("main h1")).to_have_text("Run not found")
    expect(page.locator("#run-detail")).to_have_count(0)
    expect(page.locator("main")).to_contain_text(f"No run with id {UNKNOWN}.")
    assert all_asked().count(UNKNOWN) == 1

    # An id made a moment ago may name a run the store has not written yet: asked for a few times, then not found,
    # and meanwhile the page says so rather than showing the run it came from.
    page.evaluate(f"location.hash = '#/runs/{run_id}'")
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", run_id)
    fresh = page.evaluate("`chatcmpl-${Date.now().toString(16).padStart(12, '0')}${'0'.repeat(20)}`")
    page.evaluate(f"location.hash = '#/runs/{fresh}'")
    expect(page.locator("#run-pending")).to_contain_text("made moments ago")
    expect(page.locator("#run-detail")).to_have_count(0)
    page.clock.resume()  # the tries go out as the page makes them, each after the answer to the one before
    expect(page.locator("main h1")).to_have_text("Run not found")
    page.clock.pause_at(page.evaluate("Date.now()") + 1000)
    assert all_asked().count(fresh) == 11  # the first request and ten tries, then no more


def test_esc_leaves_the_compare_view_as_it_leaves_a_run(demo: str, page: Page) -> None:
    first, _ = ask(demo, "demo-direct", "Compare me.")
    second, _ = ask(demo, "demo-critic", "Compare me.")
    page.goto(f"{demo}/v1/ui")
    expect(row(page, second)).to_be_visible()
    expect(row(page, first)).to_be_visible()
    page.evaluate(f"location.hash = '#/compare/{first}/{second}'")
    expect(page.locator('.side[data-side="B"]')).to_have_attribute("data-run-id", second)
    # In a field Esc only leaves the field.
    page.locator('input[name="a"]').focus()
    page.keyboard.press("Escape")
    expect(page).to_have_url(re.compile(rf"#/compare/{first}/{second}$"))
    assert page.evaluate("document.activeElement === document.body")
    page.keyboard.press("Escape")
    expect(page).to_have_url(re.compile(r"#/runs$"))
    expect(row(page, first)).to_be_visible()
    # A run opened from the list is left the same way.
    row(page, first).click()
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", first)
    page.keyboard.press("Escape")
    expect(page).to_have_url(re.compile(r"#/runs$"))
    # And the compare view without runs picked yet.
    page.locator("#nav-compare").click()
    expect(page.locator("form.pick")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page).to_have_url(re.compile(r"#/runs$"))
