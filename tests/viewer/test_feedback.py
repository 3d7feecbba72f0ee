"""Feedback in the viewer, in a real headless Chromium (issue 45): on a run's page a thumbs up or down with a comment,
and accept or reject on a critique stage's output, each POSTed to the runs API and then shown with the feedback
already given; the runs API reads back what the page sent. The demo server records to a SQLite store; the run is
made through the official `openai` SDK."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from .conftest import ask, screenshot


def test_thumbs_a_comment_and_a_verdict_on_the_critique_are_kept_and_shown(demo: str, page: Page) -> None:
    run_id, _ = ask(demo, "demo-critic", "Is the sky green?")
    page.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(page.locator("#no-feedback")).to_have_text("No feedback yet.")

    page.fill("#feedback-comment", "Wrong colour: the sky is blue.")
    page.click("#thumbs-down")
    entries = page.locator("#feedback-list li.feedback-entry")
    expect(entries).to_have_count(1)
    expect(entries.first).to_have_attribute("data-score", "-1")
    expect(entries.first.locator(".comment")).to_have_text("Wrong colour: the sky is blue.")

    critic = page.locator('details.stage[data-stage="critic"]')
    critic.locator("summary").click()
    critic.locator("button.accept").click()
    expect(page.locator('details.stage[data-stage="critic"] .verdicts .verdict-accept')).to_have_text("accepted")
    expect(entries).to_have_count(2)
    page.click("#thumbs-up")
    expect(entries).to_have_count(3)
    screenshot(page, "feedback")

    run = httpx.get(f"{demo}/v1/runs/{run_id}", timeout=30).json()
    kept = [(entry["score"], entry["comment"], entry["stage"], entry["verdict"]) for entry in run["feedback"]]
    assert kept == [
        (-1.0, "Wrong colour: the sky is blue.", None, None),
        (1.0, None, "critic", "accept"),
        (1.0, None, None, None),
    ]
    critic_index = next(stage["index"] for stage in run["stages"] if stage["stage"] == "critic")
    assert run["feedback"][1]["stage_index"] == critic_index


def test_a_refused_feedback_says_why_on_the_page(demo: str, page: Page) -> None:
    run_id, _ = ask(demo, "demo-direct", "Hello")
    page.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(page.locator("#no-feedback")).to_be_visible()
    assert page.locator("button.accept").count() == 0  # a direct run has no critique to judge
    page.fill("#feedback-comment", "x" * 100_001)
    page.click("#thumbs-up")
    expect(page.locator("#feedback-status")).to_contain_text("Not kept: `comment` is longer than 100000 characters")
    assert httpx.get(f"{demo}/v1/runs/{run_id}", timeout=30).json()["feedback"] == []
