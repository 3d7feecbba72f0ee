"""Shadow evaluation on live traffic (docs/guides/routing.md#shadow-evaluation), through real uvicorn: a sampled live
request's shadow candidate answers in the background after the live answer is complete, and the judge compares the
two answers in both orders. The live answer is never delayed, changed or failed by it; a shadow over its concurrency
or budget is dropped, not queued; what it spends is the operator's, not the caller's key's; its runs are the live
run's children, seen only by who sees the live run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ..cli.conftest import invoke
from ..conftest import RemoteUpstream, sdk
from .conftest import DEMO, DEMO_MODEL, metric, run_detail, serving

TEAM, OTHER = "sk-shadow-team-1", "sk-shadow-other-1"
SHADOWS = "adapter_critic_shadow_runs_total"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOW_TEAM_KEY", TEAM)
    monkeypatch.setenv("SHADOW_OTHER_KEY", OTHER)


def scripted(upstream_url: str, **shadow: Any) -> dict[str, Any]:
    """`live` answers from the upstream model `fast`; its shadow candidate `cand` from `slow`, judged by `judge`."""

    def api(model: str) -> dict[str, Any]:
        return {"model": model, "base_url": f"{upstream_url}/v1"}

    return {
        "served_models": {
            "live": {"mode": "direct", "api": api("fast"), "shadow": {"candidate": "cand", "judge": "judge",
                                                                       "share": 1.0, **shadow}},
            "cand": {"mode": "direct", "api": api("slow")},
            "judge": {"mode": "direct", "api": api("judge")},
        },
        "auth": {"keys": [{"name": "team", "key_env": "SHADOW_TEAM_KEY"},
                          {"name": "other", "key_env": "SHADOW_OTHER_KEY"}]},
    }  # fmt: skip


def client(url: str, key: str = TEAM) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))


def ask(url: str, content: str = "Hello", key: str = TEAM, **extra: Any) -> Any:
    return client(url, key).chat.completions.create(
        model="live", messages=[{"role": "user", "content": content}], **extra
    )


def judged_for_the_shadow(remote: RemoteUpstream) -> None:
    """The judge prefers the shadow's answer in both orders (B when the live answer is shown first, then A)."""
    remote.script(
        {"model": "judge", "match": "<reply_B>\nthe shadow's", "content": "B is better.\nWinner: B"},
        {"model": "judge", "match": "<reply_A>\nthe shadow's", "content": "A is better.\nWinner: A"},
    )


def test_the_live_answer_is_complete_while_its_shadow_is_still_held(
    remote: RemoteUpstream, upstream_url: str, tmp_path: Path
) -> None:
    remote.reset()
    # The shadow's call is held upstream until the test lets it go, after the live answer.
    remote.script(
        {"model": "fast", "content": "the live answer", "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                                                   "total_tokens": 7}},
        {"model": "slow", "content": "the shadow's answer", "delay": 30, "until_resumed": True},
    )  # fmt: skip
    judged_for_the_shadow(remote)
    with serving(scripted(upstream_url), tmp_path / "runs.sqlite3") as url:
        live = ask(url)
        assert live.choices[0].message.content == "the live answer"  # the live answer, as the upstream gave it
        assert remote.holding(1, wait=10) == 1  # answered while the shadow's call is still held upstream
        remote.resume()
        run = run_detail(url, live.id, until="shadows", headers={"authorization": f"Bearer {TEAM}"})
        [shadow] = run["shadows"]
        assert shadow["outcome"] == "won" and shadow["detail"]["votes"] == ["shadow", "shadow"]
        assert shadow["candidate"] == "cand" and shadow["key_name"] == "team"
        assert shadow["detail"]["live"]["tokens"] == 7 and shadow["detail"]["shadow"]["tokens"] == 3
        assert shadow["detail"]["judge"]["tokens"] == 6  # two judgements of 3
        child = run_detail(url, shadow["shadow_run_id"], headers={"authorization": f"Bearer {TEAM}"})
        assert child["served_model"] == "cand" and child["parent_run_id"] == live.id
        assert child["parent_stage"] == "shadow"
        assert child["answer"]["content"] == "the shadow's answer"
        judges = [
            run_detail(url, i, headers={"authorization": f"Bearer {TEAM}"}) for i in shadow["detail"]["judge_runs"]
        ]
        assert {j["parent_run_id"] for j in judges} == {shadow["shadow_run_id"]}
        assert metric(url, SHADOWS, TEAM, served_model="live", candidate="cand", outcome="won") == 1
        assert metric(url, "adapter_critic_shadow_tokens_total", TEAM, served_model="live") == 9
        # What the shadow spent is the operator's: the key's usage counts its one request and that run's 7 tokens.
        usage = httpx.get(f"{url}/v1/keys/team/usage", headers={"authorization": f"Bearer {TEAM}"}).json()
        assert (usage["today"]["requests"], usage["today"]["tokens"]) == (1, 7)
        # Another key sees neither the live run nor its shadow.
        for run_id in (live.id, shadow["shadow_run_id"]):
            seen = httpx.get(f"{url}/v1/runs/{run_id}", headers={"authorization": f"Bearer {OTHER}"})
            assert seen.status_code == 404
        others = httpx.get(f"{url}/v1/runs", headers={"authorization": f"Bearer {OTHER}"}).json()["data"]
        assert others == []
        # The served model's evaluations, as each key may see them: the team's one, none of the other key's.
        [mine] = httpx.get(f"{url}/v1/shadows/live", headers={"authorization": f"Bearer {TEAM}"}).json()["data"]
        assert (mine["candidate"], mine["evaluated"], mine["won"], mine["extra_tokens"]) == ("cand", 1, 1, -4)
        theirs = httpx.get(f"{url}/v1/shadows/live", headers={"authorization": f"Bearer {OTHER}"}).json()
        assert (theirs["evaluations"], theirs["data"]) == (0, [])
        for model, status in (("cand", 404), ("nowhere", 404)):
            found = httpx.get(f"{url}/v1/shadows/{model}", headers={"authorization": f"Bearer {TEAM}"})
            assert found.status_code == status and found.json()["error"]["message"]
    calls = [c["body"]["model"] for c in remote.calls()]
    assert calls.index("fast") < calls.index("judge")


@pytest.mark.parametrize("failing", ["slow", "judge"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_shadow_that_fails_never_reaches_the_client(
    remote: RemoteUpstream, upstream_url: str, tmp_path: Path, failing: str, stream: bool
) -> None:
    remote.reset()
    answers = {"slow": "the shadow's answer", "judge": "Winner: A"}
    remote.script(
        {"model": "fast", "content": "the live answer"},
        *({"model": m, "content": text} for m, text in answers.items() if m != failing),
        {"model": failing, "status": 500, "body": json.dumps({"error": {"message": "upstream down"}}), "keep": True},
    )
    with serving(scripted(upstream_url), tmp_path / "runs.sqlite3") as url:
        if stream:
            chunks = list(ask(url, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            run_id = chunks[0].id
        else:
            answer = ask(url)
            text, run_id = answer.choices[0].message.content, answer.id
        assert text == "the live answer"
        run = run_detail(url, run_id, until="shadows", headers={"authorization": f"Bearer {TEAM}"})
        [shadow] = run["shadows"]
        assert run["status"] == "ok" and shadow["outcome"] == "failed"
        assert "500" in shadow["detail"]["error"] or "upstream down" in shadow["detail"]["error"]
        assert metric(url, SHADOWS, TEAM, served_model="live", candidate="cand", outcome="failed") == 1


def test_the_sampling_share_is_honoured(tmp_path: Path) -> None:
    share, requests = 0.25, 400
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {
            "demo-direct": {"mode": "direct", "api": DEMO,
                            "shadow": {"candidate": f"critic-{DEMO_MODEL}", "judge": "demo-direct", "share": share,
                                       "concurrency": 1000}},
        },
    }  # fmt: skip
    with serving(config, None) as url, httpx.Client(base_url=f"{url}/v1") as http:
        for number in range(requests):
            body = {"model": "demo-direct", "messages": [{"role": "user", "content": f"Say {number}."}]}
            assert http.post("/chat/completions", json=body).status_code == 200
        outcomes = ("won", "tied", "lost", "failed", "dropped", "over_budget")
        counts = {o: metric(url, SHADOWS, served_model="demo-direct", candidate=f"critic-{DEMO_MODEL}", outcome=o)
                  for o in outcomes}  # fmt: skip
    sampled = sum(counts.values())
    spread = 4 * math.sqrt(requests * share * (1 - share))  # four standard deviations of the binomial count
    assert requests * share - spread <= sampled <= requests * share + spread, counts
    assert counts["dropped"] == counts["over_budget"] == counts["failed"] == 0


def test_the_shadow_budget_stops_shadows_not_live_requests(tmp_path: Path) -> None:
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {
            "demo-direct": {"mode": "direct", "api": DEMO,
                            "shadow": {"candidate": f"critic-{DEMO_MODEL}", "judge": "demo-direct", "share": 1.0,
                                       "budget_tokens": 1}},
        },
    }  # fmt: skip
    with serving(config, tmp_path / "runs.sqlite3") as url, httpx.Client(base_url=f"{url}/v1") as http:
        hello = {"model": "demo-direct", "messages": [{"role": "user", "content": "Hi"}]}
        first = http.post("/chat/completions", json=hello)
        [shadow] = run_detail(url, first.json()["id"], until="shadows")["shadows"]
        assert shadow["outcome"] == "won"  # the demo judge prefers the reviewed answer
        for _ in range(4):  # the window's budget is spent: the next shadows are not started, the requests answered
            later = http.post("/chat/completions", json=hello)
            assert later.status_code == 200 and later.json()["choices"][0]["message"]["content"]
        labels = {"served_model": "demo-direct", "candidate": f"critic-{DEMO_MODEL}"}
        assert metric(url, SHADOWS, outcome="over_budget", **labels) == 4
        assert metric(url, SHADOWS, outcome="won", **labels) == 1
    report = invoke("shadow", "report", "demo-direct", "--json", "--store", f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    assert report.exit_code == 0, report.output
    [found] = json.loads(report.stdout)
    assert found["candidate"] == f"critic-{DEMO_MODEL}" and (found["won"], found["tied"], found["lost"]) == (1, 0, 0)
    assert found["win_rate"] == 1.0 and found["extra_tokens"] > 0 and found["failed"] == 0


def test_a_shadow_over_its_concurrency_is_dropped_not_queued(
    remote: RemoteUpstream, upstream_url: str, tmp_path: Path
) -> None:
    remote.reset()
    remote.script(
        {"model": "fast", "content": "the live answer", "keep": True},
        {"model": "slow", "content": "the shadow's answer", "delay": 30, "until_resumed": True},
        {"model": "judge", "content": "Winner: tie", "keep": True},
    )
    with serving(scripted(upstream_url, concurrency=1), tmp_path / "runs.sqlite3") as url:
        first = ask(url)
        assert remote.holding(1, wait=10) == 1  # the first shadow runs (held upstream)
        second = ask(url)
        assert second.choices[0].message.content == "the live answer"
        assert metric(url, SHADOWS, TEAM, served_model="live", candidate="cand", outcome="dropped") == 1
        remote.resume()
        [shadow] = run_detail(url, first.id, until="shadows", headers={"authorization": f"Bearer {TEAM}"})["shadows"]
        assert shadow["outcome"] == "tied"
    assert [c["body"]["model"] for c in remote.calls()].count("slow") == 1  # the second request's was never asked


def test_shadow_report_says_what_no_store_holds(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite3"
    with serving({"served_models": {"m": {"mode": "direct", "api": DEMO}}}, store) as url:
        httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    found = invoke("shadow", "report", "m", "--store", f"sqlite:///{store}")
    assert found.exit_code == 1 and "no shadow evaluations of 'm'" in found.stderr


def test_what_a_failed_shadow_spent_counts_against_the_shadow_budget(
    remote: RemoteUpstream, upstream_url: str, tmp_path: Path
) -> None:
    remote.reset()
    remote.script(
        {"model": "fast", "content": "the live answer"},
        {"model": "slow", "content": "a draft"},  # the candidate's draft: 3 tokens spent
        {"model": "crit", "status": 500, "body": json.dumps({"error": {"message": "reviewer down"}}), "keep": True},
    )
    config = scripted(upstream_url, budget_tokens=3)
    config["served_models"]["cand"] = {
        "mode": "critic", "on_review_error": "fail", "api": {"model": "slow", "base_url": f"{upstream_url}/v1"},
        "critic": {"model": "crit", "base_url": f"{upstream_url}/v1"},
    }  # fmt: skip
    with serving(config, tmp_path / "runs.sqlite3") as url:
        first = ask(url)
        [shadow] = run_detail(url, first.id, until="shadows", headers={"authorization": f"Bearer {TEAM}"})["shadows"]
        assert shadow["outcome"] == "failed" and "reviewer down" in shadow["detail"]["error"]
        assert shadow["detail"]["shadow"]["tokens"] == 3 and shadow["detail"]["judge"]["tokens"] == 0
        assert metric(url, "adapter_critic_shadow_tokens_total", TEAM, served_model="live") == 3
        ask(url)  # the window's 3 tokens are spent: not shadowed
        assert metric(url, SHADOWS, TEAM, served_model="live", candidate="cand", outcome="over_budget") == 1


def test_the_shadows_api_says_when_the_run_store_is_off() -> None:
    shadow = {"candidate": f"critic-{DEMO_MODEL}", "judge": "demo-direct", "share": 1.0}
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {"demo-direct": {"mode": "direct", "api": DEMO, "shadow": shadow}},
        "store": {"url": "none"},
    }
    with serving(config, None) as url:
        answer = httpx.get(f"{url}/v1/shadows/demo-direct")
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable"
        assert "kept in the run store, which is off" in answer.json()["error"]["message"]
        bad = httpx.get(f"{url}/v1/shadows/demo-direct", params={"since_hours": "soon"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "since_hours"
