"""An `auto` served model (docs/guides/routing.md#auto-models), through real uvicorn and the official SDK: the first
rule that holds decides (a key, the route header, metadata, tools, length, class), else the policy `route fit`
stored, per request class and under the effort dial, else the first candidate; every decision is the run's route
note; a refit changes the decisions as the measurements say; a request may choose its effort and give its
candidate settings, never a mode or a target."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ..cli.conftest import invoke, write_jsonl
from ..conftest import RemoteUpstream, sdk
from ..helpers import envelope, extension
from .conftest import DEMO, DEMO_MODEL, run_detail, serving

TEAM, SOLO = "sk-auto-team-1", "sk-auto-solo-1"
CANDIDATES = ("cand-a", "cand-b", "cand-c")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTO_TEAM_KEY", TEAM)
    monkeypatch.setenv("AUTO_SOLO_KEY", SOLO)


def scripted(upstream_url: str, **route: Any) -> dict[str, Any]:
    """`auto` over three served models, each answering from its own upstream model (`model-a`…)."""
    served: dict[str, Any] = {
        name: {"mode": "direct", "api": {"model": f"model-{name[-1]}", "base_url": f"{upstream_url}/v1"}}
        for name in CANDIDATES
    }
    served["auto"] = {"mode": "auto", "candidates": list(CANDIDATES), "explore": 0.0, **route}
    return {
        "served_models": served,
        "auth": {"keys": [{"name": "team", "key_env": "AUTO_TEAM_KEY"},
                          {"name": "solo", "key_env": "AUTO_SOLO_KEY", "models": ["auto"]}]},
    }  # fmt: skip


def ask(url: str, content: str = "Hello", key: str = TEAM, **extra: Any) -> Any:
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    return client.chat.completions.create(model="auto", messages=[{"role": "user", "content": content}], **extra)


def route_of(answer: Any) -> dict[str, Any]:
    note: dict[str, Any] = extension(answer)["intermediate"]["route"]
    return note


TOOL = {"type": "function", "function": {"name": "look_up", "parameters": {"type": "object", "properties": {}}}}


def test_the_first_rule_that_holds_decides(remote: RemoteUpstream, upstream_url: str, tmp_path: Path) -> None:
    remote.reset()
    rules = [
        {"use": "cand-c", "header": "careful"},
        {"use": "cand-b", "key": "solo"},
        {"use": "cand-b", "metadata": {"tier": "gold"}},
        {"use": "cand-c", "tools": True},
        {"use": "cand-b", "min_chars": 200},
        {"use": "cand-c", "class": "sums"},
    ]
    classes = [{"name": "sums", "features": ["numbers"], "pattern": r"\+"}]
    with serving(scripted(upstream_url, rules=rules, classes=classes), tmp_path / "runs.sqlite3") as url:
        plain = ask(url)
        assert plain.choices[0].message.content == "echo model-a: Hello"  # no rule: the first candidate
        assert route_of(plain) == {"candidate": "cand-a", "by": "default", "class": "text-short", "effort": 0.5}
        header = ask(url, extra_headers={"x-adapter-critic-route": "careful"})
        assert header.choices[0].message.content == "echo model-c: Hello"
        assert (route_of(header)["by"], route_of(header)["rule"]) == ("rule", 0)
        assert route_of(ask(url, key=SOLO))["rule"] == 1
        gold = ask(url, metadata={"tier": "gold"})
        assert (route_of(gold)["candidate"], route_of(gold)["rule"]) == ("cand-b", 2)
        assert route_of(ask(url, metadata={"tier": "silver"}))["by"] == "default"
        tools = ask(url, tools=[TOOL])
        assert (route_of(tools)["rule"], route_of(tools)["features"]) == (3, ["tools"])
        assert route_of(ask(url, "x" * 250))["rule"] == 4
        sums = ask(url, "What is 2 + 2?")
        assert route_of(sums) == {"candidate": "cand-c", "by": "rule", "class": "sums", "features": ["numbers"],
                                  "effort": 0.5, "rule": 5}  # fmt: skip
        assert route_of(ask(url, "What is 2 times 2?"))["class"] == "numbers-short"  # not the class's pattern
        # The decision is in the run's record too, and its chosen candidate's run is the auto run's child.
        run = run_detail(url, sums.id, headers={"authorization": f"Bearer {TEAM}"})
        assert run["served_model"] == "auto" and run["intermediate"]["route"] == route_of(sums)
        [child] = run["children"]
        assert (child["served_model"], child["parent_stage"]) == ("cand-c", "api")
    assert [call["body"]["model"] for call in remote.calls()][:2] == ["model-a", "model-c"]


def test_a_key_that_may_use_only_the_auto_model_reaches_its_candidates_through_it(
    remote: RemoteUpstream, upstream_url: str
) -> None:
    remote.reset()
    with serving(scripted(upstream_url), None) as url:
        assert ask(url, key=SOLO).choices[0].message.content == "echo model-a: Hello"
        client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key=SOLO, max_retries=0))
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="cand-a", messages=[{"role": "user", "content": "Hi"}])


def test_an_auto_model_takes_settings_and_effort_not_a_mode_or_a_target(
    remote: RemoteUpstream, upstream_url: str
) -> None:
    remote.reset()
    headers = {"authorization": f"Bearer {TEAM}"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
    with serving(scripted(upstream_url), None) as url:
        for given, param in (({"mode": "critic"}, "mode"), ({"api_model": "x"}, "api_model"),
                             ({"critic_base_url": f"{upstream_url}/v1"}, "critic_base_url")):  # fmt: skip
            answer = httpx.post(f"{url}/v1/chat/completions", json={**body, "x_adapter_critic": given}, headers=headers)
            error = envelope(answer, 400)
            assert error["param"] == f"x_adapter_critic.{param}" and "auto model chooses" in error["message"]
        direct = {**body, "model": "cand-a", "x_adapter_critic": {"effort": 0.2}}
        error = envelope(httpx.post(f"{url}/v1/chat/completions", json=direct, headers=headers), 400)
        assert error["param"] == "x_adapter_critic.effort" and "not an auto model" in error["message"]
        out_of_range = {**body, "x_adapter_critic": {"effort": 2}}
        assert httpx.post(f"{url}/v1/chat/completions", json=out_of_range, headers=headers).status_code == 400
        chosen = httpx.post(f"{url}/v1/chat/completions", json={**body, "x_adapter_critic": {"effort": 0.9}},
                            headers=headers)  # fmt: skip
        assert chosen.status_code == 200 and chosen.json()["adapter_critic"]["intermediate"]["route"]["effort"] == 0.9
    assert [call["body"]["model"] for call in remote.calls()] == ["model-a"]


def test_a_streamed_request_is_routed_and_streamed_from_its_candidate(
    remote: RemoteUpstream, upstream_url: str
) -> None:
    remote.reset()
    remote.script({"model": "model-c", "content": "streamed from c"})
    with serving(scripted(upstream_url, rules=[{"use": "cand-c", "header": "c"}]), None) as url:
        chunks = list(ask(url, stream=True, extra_headers={"x-adapter-critic-route": "c"}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed from c"


def test_the_explore_share_is_honoured() -> None:
    share, requests = 0.2, 300
    candidates = [f"{mode}-{DEMO_MODEL}" for mode in ("direct", "re2", "critic")]
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {
            "demo-direct": {"mode": "direct", "api": DEMO},
            "auto": {"mode": "auto", "candidates": candidates, "explore": share},
        },
    }
    with serving(config, None) as url, httpx.Client(base_url=f"{url}/v1") as http:
        decisions = []
        for _ in range(requests):
            body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
            decisions.append(
                http.post("/chat/completions", json=body).json()["adapter_critic"]["intermediate"]["route"]
            )
    explored = [d for d in decisions if d["by"] == "explore"]
    spread = 4 * math.sqrt(requests * share * (1 - share))  # four standard deviations of the binomial count
    assert requests * share - spread <= len(explored) <= requests * share + spread
    assert {d["candidate"] for d in explored} == set(candidates[1:])  # another than the one chosen
    assert {d["candidate"] for d in decisions if d["by"] == "default"} == {candidates[0]}


def tune_dir(tmp_path: Path, name: str, scores: dict[str, tuple[float, int]]) -> Path:
    """A `tune` output directory over the demo model, as tune writes it: per candidate label, every item of the
    dataset (two sums, two greetings) scored as `scores` says for the sums (greetings: 1 for everyone)."""
    out = tmp_path / name
    out.mkdir()
    dataset = write_jsonl(
        tmp_path / f"{name}.jsonl",
        *({"id": f"sum-{i}", "prompt": f"What is {i} + {i}?", "expected": "x"} for i in (1, 2)),
        *({"id": f"hi-{i}", "prompt": f"Say hi {'once' if i == 1 else 'twice'}.", "expected": "x"} for i in (1, 2)),
    )
    (out / "pareto.json").write_text(json.dumps({"dataset": str(dataset), "model": "demo-direct",
                                                  "upstream_model": DEMO_MODEL, "candidates": []}))  # fmt: skip
    lines = []
    for label, (score, tokens) in scores.items():
        for item in ("sum-1", "sum-2", "hi-1", "hi-2"):
            sums = item.startswith("sum")
            lines.append({"id": item, "model": label, "scorer": "contains", "score": score if sums else 1.0,
                          "total_usage": {"total_tokens": tokens}})  # fmt: skip
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def test_a_refit_changes_the_decisions_as_the_measurements_say(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite3"
    candidates = [f"direct-{DEMO_MODEL}", f"self_consistency-{DEMO_MODEL}"]
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {
            "demo-direct": {"mode": "direct", "api": DEMO},
            "auto": {"mode": "auto", "candidates": candidates, "explore": 0.0, "refresh_seconds": 0},
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "store": {"url": f"sqlite:///{store}"}}))
    # First measured: self-consistency gets the sums right, direct gets them wrong; both greet.
    first = tune_dir(tmp_path, "first", {"direct": (0.0, 20), "self_consistency": (1.0, 100)})
    fitted = invoke("route", "fit", "auto", "-c", str(path), "--tune", str(first))
    assert fitted.exit_code == 0, fitted.output
    assert "stored policy version 1 of auto (8 from tune; cost in tokens)" in fitted.stdout
    shown = invoke("route", "show", "auto", "-c", str(path), "--json")
    policy = json.loads(shown.stdout)
    assert policy["version"] == 1 and set(policy["classes"]) == {"numbers-short", "text-short"}
    with serving(config, store) as url, httpx.Client(base_url=f"{url}/v1") as http:

        def decided(content: str, effort: float | None = None) -> dict[str, Any]:
            body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": content}]}
            if effort is not None:
                body["x_adapter_critic"] = {"effort": effort}
            note: dict[str, Any] = http.post("/chat/completions", json=body).json()["adapter_critic"]["intermediate"]
            route: dict[str, Any] = note["route"]
            return route

        sums, greeting = decided("What is 4 + 4?"), decided("Say hello.")
        assert (sums["candidate"], sums["by"], sums["policy"]) == (candidates[1], "policy", 1)
        assert (sums["expected_score"], sums["expected_cost"], sums["unit"]) == (1.0, 100.0, "tokens")
        assert (greeting["candidate"], greeting["class"]) == (candidates[0], "text-short")  # as good, and cheaper
        # A class the policy never measured is weighed over every class's measurements.
        other = decided("def f():\n    return 1;")
        assert other["class"] == "code-short" and "measured_class" not in other
        # Then measured again: direct now gets the sums half right at a fifth of the cost. At effort 0.5 that pays
        # (0.5 - 0.5 * 20/100 = 0.4 against 1 - 0.5 = 0.5: still self-consistency); at effort 0, direct.
        second = tune_dir(tmp_path, "second", {"direct": (0.5, 20), "self_consistency": (1.0, 100)})
        refit = invoke("route", "fit", "auto", "-c", str(path), "--tune", str(second))
        assert "stored policy version 2" in refit.stdout
        assert decided("What is 5 + 5?")["candidate"] == candidates[1]
        lean = decided("What is 5 + 5?", effort=0.0)
        assert (lean["candidate"], lean["policy"], lean["effort"]) == (candidates[0], 2, 0.0)
        assert decided("What is 5 + 5?", effort=1.0)["candidate"] == candidates[1]
    text = invoke("route", "show", "auto", "-c", str(path), "--effort", "0")
    assert "policy version 2 of auto" in text.stdout and "★" in text.stdout


def test_route_fit_and_show_say_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    config = {"served_models": {"m": {"mode": "direct", "api": DEMO},
                                "auto": {"mode": "auto", "candidates": ["m"]}},
              "store": {"url": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}}  # fmt: skip
    path.write_text(json.dumps(config))
    assert "is not an auto model" in invoke("route", "fit", "m", "-c", str(path)).stderr
    assert "no measurements of 'auto'" in invoke("route", "fit", "auto", "-c", str(path)).stderr
    assert "has no policy yet" in invoke("route", "show", "auto", "-c", str(path)).stderr
    assert "not a tune output directory" in invoke("route", "fit", "auto", "-c", str(path), "--tune",
                                                   str(tmp_path)).stderr  # fmt: skip


def test_route_fit_learns_from_shadow_outcomes_and_feedback_in_the_store(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite3"
    critic = f"critic-{DEMO_MODEL}"
    config = {
        "models": {"technique_prefixes": True, "upstream": "demo-direct"},
        "served_models": {
            "demo-direct": {"mode": "direct", "api": DEMO,
                            "shadow": {"candidate": critic, "judge": "demo-direct", "share": 1.0}},
            "auto": {"mode": "auto", "candidates": ["demo-direct", critic], "explore": 0.0,
                     "classes": [{"name": "review", "pattern": "(?i)checked"}]},
        },
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "store": {"url": f"sqlite:///{store}"}}))
    with serving(config, store) as url, httpx.Client(base_url=f"{url}/v1") as http:
        ids = []
        for question in ("Was it checked?", "Was this checked?", "Say hello."):
            body = {"model": "demo-direct", "messages": [{"role": "user", "content": question}]}
            ids.append(http.post("/chat/completions", json=body).json()["id"])
        outcomes = [run_detail(url, run_id, until="shadows")["shadows"][0]["outcome"] for run_id in ids]
        assert outcomes == ["won", "won", "won"]  # the demo judge prefers the reviewed answer
        given = http.post(f"/runs/{ids[2]}/feedback", json={"score": 1})  # the greeting was fine as it was
        assert given.status_code == 201, given.text
    fitted = invoke("route", "fit", "auto", "-c", str(path))
    assert fitted.exit_code == 0, fitted.output
    assert "(1 from feedback, 6 from shadow; cost in tokens)" in fitted.stdout
    policy = json.loads(invoke("route", "show", "auto", "-c", str(path), "--json").stdout)
    review = {arm["candidate"]: arm for arm in policy["classes"]["review"]}
    assert (review[critic]["score"], review["demo-direct"]["score"], review[critic]["n"]) == (1.0, 0.0, 2)
    greeting = {arm["candidate"]: arm for arm in policy["classes"]["text-short"]}
    assert greeting["demo-direct"]["n"] == 2 and greeting["demo-direct"]["score"] == 0.5  # a loss, and the feedback
