"""An auto model's route and a run's shadow evaluations in the viewer, in a real headless Chromium: the page of a
run of an `auto` served model says which candidate answered (a link to its run) and why — a rule, the default, the
policy `route fit` learnt —, with the request's class, features and effort; the page of a shadowed run shows each
evaluation: the candidate, its outcome, the judge's vote in both orders, both sides' tokens and time, links to the
shadow run and the judge's runs, and why it failed when it did. The server serves the demo model in-process,
recording to a SQLite store; the policy is fitted with the command line from the store's shadow evaluations."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from ..cli.conftest import SCRIPT, script_env
from .conftest import screenshot, serving

DIRECT = "direct-adapter-critic-demo-model"
CRITIC = "critic-adapter-critic-demo-model"
CONFIG = f"""
[models]
technique_prefixes = true
upstream = "demo-direct"

[served_models.demo-direct]
mode = "direct"
api = {{ model = "adapter-critic-demo-model", base_url = "/demo/v1" }}

[served_models.auto]
mode = "auto"
candidates = ["{DIRECT}", "{CRITIC}"]
rules = [{{ use = "{CRITIC}", header = "review" }}]
explore = 0.0
refresh_seconds = 0
shadow = {{ candidate = "{CRITIC}", judge = "demo-direct", share = 1.0 }}

[served_models.nowhere]
mode = "direct"
api = {{ model = "absent", base_url = "http://127.0.0.1:{{port}}/v1", retries = 0 }}

[served_models.hopeful]
mode = "direct"
api = {{ model = "adapter-critic-demo-model", base_url = "/demo/v1" }}
shadow = {{ candidate = "nowhere", judge = "demo-direct", share = 1.0 }}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The server of CONFIG and its folder; `nowhere` is a port bound but not listening (a connection refused)."""
    folder = tmp_path_factory.mktemp("route")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        with serving(folder, CONFIG.replace("{port}", str(closed.getsockname()[1]))) as url:
            yield url, folder


def ask(url: str, model: str, content: str, route: str | None = None) -> dict[str, Any]:
    """One chat completion (with the `x-adapter-critic-route` header when `route` is given)."""
    headers = {} if route is None else {"x-adapter-critic-route": route}
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    completion: dict[str, Any] = answer.json()
    return completion


def shadowed(url: str, run_id: str) -> dict[str, Any]:
    """The run's detail once its shadow evaluation is written (it runs in the background, after the answer)."""
    for _ in range(500):
        found = httpx.get(f"{url}/v1/runs/{run_id}", timeout=30)
        if found.status_code == 200 and found.json()["shadows"]:
            detail: dict[str, Any] = found.json()
            return detail
        httpx.get(f"{url}/v1/health")  # the next look waits on the server, not on a sleep
    raise AssertionError(f"run {run_id} has no shadow evaluation")


def test_a_defaulted_run_shows_its_route_and_its_winning_shadow(served: tuple[str, Path], page: Page) -> None:
    url, _ = served
    run_id = ask(url, "auto", "Is 91 prime?")["adapter_critic"]["run_id"]
    detail = shadowed(url, run_id)
    [row] = detail["shadows"]
    assert row["outcome"] == "won" and row["detail"]["votes"] == ["shadow", "shadow"]
    [child] = [c for c in detail["children"] if c["parent_stage"] == "api"]
    [summary] = httpx.get(f"{url}/v1/shadows/auto").json()["data"]
    assert summary["candidate"] == CRITIC and summary["won"] >= 1 and summary["lost"] == 0
    page.goto(f"{url}/v1/ui#/runs/{run_id}")

    expect(page.locator("#route-candidate")).to_have_text(DIRECT)
    expect(page.locator("#route-candidate")).to_have_attribute("href", f"#/runs/{child['id']}")
    expect(page.locator("#route-why")).to_have_text("default: no rule held and no policy chose, so the first candidate")
    expect(page.locator("#route-class")).to_have_text("numbers-short")
    expect(page.locator("#route-features")).to_have_text("numbers")
    expect(page.locator("#route-effort")).to_have_text("0.5")

    shadow = page.locator(f'#shadows .shadow[data-shadow="{row["shadow_run_id"]}"]')
    expect(shadow.locator(".shadow-candidate")).to_have_text(CRITIC)
    expect(shadow.locator(".outcome")).to_have_text("won")
    expect(shadow.locator(".shadow-votes li")).to_have_text(
        [
            "With the live answer shown first, the judge preferred the candidate",
            "With the candidate's answer shown first, the judge preferred the candidate",
        ]
    )
    extra = row["detail"]["shadow"]["tokens"] - row["detail"]["live"]["tokens"]
    expect(shadow.locator(".shadow-extra-tokens")).to_have_text(f"+{extra:,}")
    expect(shadow.locator(".shadow-extra-ms")).to_have_text(re.compile("^[+\u2212][0-9.]+ (ms|s)$"))
    expect(shadow.locator(".shadow-run a")).to_have_attribute("href", f"#/runs/{row['shadow_run_id']}")
    judges = shadow.locator(".judge-runs a")
    expect(judges).to_have_text(["order 1", "order 2"])
    for index, judge in enumerate(row["detail"]["judge_runs"]):
        expect(judges.nth(index)).to_have_attribute("href", f"#/runs/{judge}")
    expect(shadow.locator(".shadow-error")).to_have_count(0)
    # Beside it, every evaluation of the served model this reader sees, per candidate (`GET /v1/shadows/auto`).
    line = page.locator(f'#shadow-summary li[data-candidate="{CRITIC}"]')
    expect(line).to_contain_text(
        f"{summary['evaluated']} judged — won {summary['won']}, tied {summary['tied']}, lost 0"
    )
    low, high = summary["win_rate_ci"]
    expect(line.locator(".shadow-win-rate")).to_have_text(f"{summary['win_rate']:.2f} [{low:.2f}, {high:.2f}]")
    # The generic list of intermediate values shows the route note as the data it is (as `votes` and others).
    intermediate = page.locator('details[data-key="intermediate"]')
    intermediate.locator("summary").click()
    expect(intermediate.locator("pre.json").first).to_contain_text('"by": "default"')
    screenshot(page, "route-and-shadow")

    judges.nth(1).click()  # a judge's run: a child of the shadow run, which is a child of this one
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", row["detail"]["judge_runs"][1])
    expect(page.locator("#parent-run")).to_have_text(row["shadow_run_id"])
    page.locator("#parent-run").click()
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", row["shadow_run_id"])
    expect(page.locator("#parent-run")).to_have_text(run_id)
    expect(page.locator("#route")).to_have_count(0)  # the shadow ran the candidate itself: no route of its own


def test_a_rule_and_then_the_policy_choose_the_candidate(served: tuple[str, Path], page: Page) -> None:
    url, folder = served
    ruled = ask(url, "auto", "Is 97 prime?", route="review")["adapter_critic"]["run_id"]
    [row] = shadowed(url, ruled)["shadows"]
    page.goto(f"{url}/v1/ui#/runs/{ruled}")
    expect(page.locator("#route-candidate")).to_have_text(CRITIC)
    expect(page.locator("#route-why")).to_have_text("rule 0: the first of the served model's rules that held")
    shadow = page.locator(f'#shadows .shadow[data-shadow="{row["shadow_run_id"]}"]')
    expect(shadow.locator(".outcome")).to_have_text(row["outcome"])
    page.locator("#route-candidate").click()
    expect(page).to_have_url(re.compile(r"#/runs/.+\.1$"))
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", f"{ruled}.1")
    expect(page.locator("#parent-run")).to_have_text(ruled)

    # The policy learnt from the store's shadow evaluations (the installed command, in a process of its own).
    env = {**script_env(), "ADAPTER_CRITIC_STORE": f"sqlite:///{folder}/r.db"}
    command = [str(SCRIPT), "route", "fit", "auto", "-c", str(folder / "config.toml")]
    fitted = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert fitted.returncode == 0 and "stored policy version 1 of auto" in fitted.stdout, fitted.stderr

    body = ask(url, "auto", "Is 93 prime?")
    route = body["adapter_critic"]["intermediate"]["route"]
    assert route["by"] == "policy" and route["candidate"] == CRITIC and route["unit"] == "tokens"
    cost = f"{route['expected_cost']:,.1f}".removesuffix(".0")  # as the page writes a number of tokens
    page.goto(f"{url}/v1/ui#/runs/{body['adapter_critic']['run_id']}")
    expect(page.locator("#route-candidate")).to_have_text(CRITIC)
    expect(page.locator("#route-why")).to_have_text(
        f"policy v1 for class numbers-short: expected score {route['expected_score']:.3f}, expected cost {cost} tokens"
    )


def test_a_failed_shadow_says_why(served: tuple[str, Path], page: Page) -> None:
    url, _ = served
    run_id = ask(url, "hopeful", "Hello")["adapter_critic"]["run_id"]
    [row] = shadowed(url, run_id)["shadows"]
    assert row["outcome"] == "failed" and row["detail"]["error"]
    page.goto(f"{url}/v1/ui#/runs/{run_id}")
    shadow = page.locator(f'#shadows .shadow[data-shadow="{row["shadow_run_id"]}"]')
    expect(shadow.locator(".shadow-candidate")).to_have_text("nowhere")
    expect(shadow.locator(".outcome")).to_have_text("failed")
    expect(shadow.locator(".shadow-error pre")).to_have_text(row["detail"]["error"])
    expect(shadow.locator(".shadow-votes")).to_have_count(0)
    expect(page.locator("#route")).to_have_count(0)  # not an auto model: no route
    screenshot(page, "shadow-failed")
