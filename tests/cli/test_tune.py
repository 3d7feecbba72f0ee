"""`adapter-critic tune` (issue 45): on the demo, offline, it races every workflow and chains of two, re-checks the
front on held-out items, and writes pareto.json, report.md, a self-contained report.html with the plot, and a
config.toml that a real uvicorn serves to the openai SDK; a budget stops it, `--resume` goes on without asking again
what was answered, its runs are in the run store, and mistakes are one line."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from adapter_critic.config import load_config
from adapter_critic.tuning.candidates import candidates
from adapter_critic.workflows import registry
from adapter_critic.workflows.prompts import SECOND_PASS_INSTRUCTION

from ..conftest import RemoteUpstream, run_app, sdk
from .conftest import EXAMPLES, SCRIPT, invoke, one_error_line, script_env, write_jsonl

DATASET = EXAMPLES / "eval" / "tune.jsonl"
ITEMS = sum(1 for line in DATASET.read_text(encoding="utf-8").splitlines() if line.strip())


def tune(out: Path, *args: str, store: Path | None = None) -> Any:
    env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{store}"} if store is not None else None
    return invoke("tune", str(DATASET), "--model", "demo-direct", "--output-dir", str(out), *args, env=env)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Path]:
    """One whole `tune` on the demo (every candidate), its output directory, what it printed and its run store."""
    out = tmp_path_factory.mktemp("tuned")
    store = out / "runs.sqlite3"
    return out, tune(out / "out", store=store), store


def pareto(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "pareto.json").read_text(encoding="utf-8"))
    return data


def test_every_workflow_and_chain_is_a_candidate_with_the_grid_its_settings_declare() -> None:
    found = candidates()
    workflows = {c.workflow for c in found if len(c.modes) == 1}
    assert workflows == set(registry.names())
    assert found[0].label == "direct"  # the baseline first
    consistency = [c.settings for c in found if c.modes == ("self_consistency",)]
    assert {"n": 3} in consistency and {} in consistency  # the default and half of it, within the request's cap
    chains = [c for c in found if len(c.modes) == 2]
    assert chains and all(registry.get(c.modes[1]).reviews_draft for c in chains)
    assert all(c.modes[0] not in ("direct", c.modes[1]) for c in chains)
    assert len({c.label for c in found}) == len(found)


def test_tune_writes_the_front_checked_on_held_out_items(tuned: tuple[Path, Any, Path]) -> None:
    root, result, _ = tuned
    out = root / "out"
    assert result.exit_code == 0, result.stderr
    data = pareto(out)
    assert data["train_items"] + data["holdout_items"] == ITEMS and data["holdout_items"] == round(ITEMS * 0.3)
    entries = {e["label"]: e for e in data["candidates"]}
    assert set(entries) == {c.label for c in candidates()}
    for entry in entries.values():
        assert {"workflow", "settings", "score", "ci", "cost", "tokens", "calls", "latency_ms", "on_front"} <= set(
            entry
        )
    # Successive halving: most candidates stop early, and every finalist answered every training item.
    items = Counter(e["items"] for e in entries.values())
    assert items[data["train_items"]] < len(entries) / 2
    assert all(e["items"] == data["train_items"] for e in entries.values() if e["finalist"])
    # On the demo, self-consistency outvotes the model's slip on sums: the front holds it above direct, on items
    # the race never saw, with a paired test against direct.
    front = [e for e in entries.values() if e["on_front"]]
    best = max(front, key=lambda e: e["holdout"]["score"])
    assert best["workflow"] == "self_consistency"
    assert best["holdout"]["score"] > entries["direct"]["holdout"]["score"]
    assert best["vs_direct"]["wins"] > 0 and best["vs_direct"]["losses"] == 0 and best["vs_direct"]["p_sign"] < 0.05
    assert entries["direct"]["on_front"]  # the cheapest is on a front of score against cost
    checked = {label for label, e in entries.items() if e["holdout"] is not None}
    assert checked == {label for label, e in entries.items() if e["on_train_front"]} | {"direct"}
    held_out = set(data["holdout_ids"])
    asked = [(line["id"], line["model"]) for line in _results(out)]
    assert {label for i, label in asked if i in held_out} == checked  # only they were asked a held-out item
    assert "rung 1/" in result.stderr and "held out items" in result.stderr


def test_the_reports_open_offline_and_show_the_plot(tuned: tuple[Path, Any, Path]) -> None:
    out = tuned[0] / "out"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<svg" in page and 'class="front"' in page
    assert page.count("<circle") >= 3 and "<title>self_consistency" in page
    assert not re.search(r"(src|href)=\"https?://", page) and "<script" not in page  # nothing to fetch
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "| ★ self_consistency" in markdown and "| direct" not in markdown.split("★ direct")[0][-3:]
    assert tuned[1].stdout.count("★") == sum(1 for e in pareto(out)["candidates"] if e["on_front"])


def test_the_config_serves_the_front_to_the_openai_sdk(tuned: tuple[Path, Any, Path], tmp_path: Path) -> None:
    out = tuned[0] / "out"
    text = (out / "config.toml").read_text(encoding="utf-8")
    config = load_config(out / "config.toml")
    front = [e for e in pareto(out)["candidates"] if e["on_front"]]
    assert len(config.served_models) >= len(front)
    modes = Counter(served.mode for served in config.served_models.values())
    assert modes == Counter(e["workflow"].split("&")[-1] for e in front) + Counter(
        e["workflow"].split("&")[0] for e in front if "&" in e["workflow"]
    )
    with run_app(tmp_path / "config.toml", text) as (url, _):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        name = next(n for n, s in config.served_models.items() if s.mode == "self_consistency")
        reply = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "What is 17 * 23?"}], seed=1,
            extra_body={"x_adapter_critic": {"extract": "boxed"}},
        )  # fmt: skip
        assert "\\boxed{391}" in (reply.choices[0].message.content or "")
        assert reply.model_extra is not None and reply.model_extra["adapter_critic"]["mode"] == "self_consistency"
    evaluated = invoke("eval", str(DATASET), "-c", str(out / "config.toml"), "-m", name, "-o", str(tmp_path / "e"))
    assert evaluated.exit_code == 0, evaluated.stderr  # in-process too: the demo model a config names is served


def test_its_runs_are_in_the_run_store(tuned: tuple[Path, Any, Path]) -> None:
    _, result, store = tuned
    with sqlite3.connect(store) as db:
        served = Counter(row[0] for row in db.execute("SELECT served_model FROM runs WHERE parent_run_id IS NULL"))
    asked = len(_results(tuned[0] / "out"))
    assert sum(served.values()) == asked
    assert served["self_consistency-adapter-critic-demo-model"] > 0
    assert "runs recorded to" in result.stdout


def test_a_budget_stops_it_and_resume_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = tune(out, "--budget-calls", "60", "--concurrency", "1")
    assert first.exit_code == 0, first.stderr
    stopped = pareto(out)
    assert stopped["out_of_budget"] and 60 <= stopped["spent"]["calls"] < 60 + 12  # one request in flight at most
    before = {(line["id"], line["model"]): line["run_id"] for line in _results(out)}
    resumed = tune(out, "--resume", "--techniques", "critic,self_consistency,best_of_n&critic")
    assert resumed.exit_code == 0, resumed.stderr
    after = _results(out)
    again = Counter((line["id"], line["model"]) for line in after)
    assert all(count == 1 for count in again.values())  # nothing answered before was asked again
    assert all(line["run_id"] == before[key] for line in after if (key := (line["id"], line["model"])) in before)
    assert not pareto(out)["out_of_budget"] and any(e["on_front"] for e in pareto(out)["candidates"])


def test_on_a_scripted_upstream_the_technique_that_answers_right_wins(
    tmp_path: Path, remote: RemoteUpstream, upstream_url: str
) -> None:
    """An upstream that answers 41 to everything, and 42 only when asked to revise after a critique: `critic` must
    be on the front above `direct`, and the techniques that never revise (re2, self-consistency's vote of 41s) score
    as direct does."""
    remote.reset()
    revise = SECOND_PASS_INSTRUCTION.partition("{critique}")[0].strip()
    remote.script({"content": "The answer is 42.", "match": revise, "keep": True},
                  {"content": "The answer is 41.", "keep": True})  # fmt: skip
    config = tmp_path / "config.toml"
    config.write_text(
        f'[served_models.local]\nmode = "direct"\napi = {{ model = "m", base_url = "{upstream_url}/v1" }}\n'
    )
    dataset = write_jsonl(
        tmp_path / "d.jsonl", *({"prompt": f"What is 6 * 7? ({i})", "expected": "42"} for i in range(8))
    )
    out = tmp_path / "out"
    result = invoke("tune", str(dataset), "-c", str(config), "--model", "local", "--scorer", "contains",
                    "--techniques", "critic,re2,self_consistency", "--output-dir", str(out))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    entries = {e["label"]: e for e in pareto(out)["candidates"]}
    assert entries["critic"]["on_front"] and entries["critic"]["holdout"]["score"] == 1.0
    assert entries["direct"]["score"] == 0.0 and entries["direct"]["holdout"]["score"] == 0.0
    never = [e for label, e in entries.items() if label.startswith(("re2", "self_consistency"))]
    assert never and all(e["score"] == 0.0 for e in never)  # as direct: on the front only where as cheap as it
    assert not any(e["on_front"] for e in never if e["tokens"] > entries["direct"]["tokens"])
    assert {call["body"]["model"] for call in remote.calls()} == {"m"}  # every stage called the tuned model
    assert "tuned-critic" in (out / "config.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "nope"], "--model 'nope' is no served model of the built-in demo"),
        (["--model", "demo-direct", "--techniques", "critic,think"], "think is not a workflow"),
        (["--model", "demo-direct", "--techniques", "critic&best_of_n"], "best_of_n reviews no draft"),
        (["--model", "demo-direct", "--budget-cost", "1"], "--budget-cost needs a price for 'adapter-critic-demo"),
        (["--model", "demo-direct", "--holdout", "0.8"], "tune needs at least 2 (lower --holdout)"),
        (["--model", "demo-direct", "--scorer", "judge:nobody"], "does not serve 'nobody'"),
    ],
)
def test_mistakes_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    dataset = write_jsonl(tmp_path / "d.jsonl", *({"prompt": f"q{i}", "expected": "x"} for i in range(4)))
    result = invoke("tune", str(dataset), "--output-dir", str(tmp_path / "out"), *args)
    assert says in one_error_line(result)


def _results(out: Path) -> list[dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


PLUGIN = '''
from typing import Annotated

import msgspec

from adapter_critic import Answer, FinalCall, PerRequest, RunContext, Workflow


class EchoTwiceSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    times: Annotated[int, msgspec.Meta(ge=1, le=6), PerRequest(cap=4)] = 2


class EchoTwice(Workflow):
    """The API model asked `times` times; the last answer stands."""

    name = "echo_twice"
    stages = ("api:<i>",)
    Settings = EchoTwiceSettings

    async def run(self, run: RunContext) -> FinalCall | None:
        for i in range(run.plan.settings.times):
            answer = await run.first_call(f"api:{i}", run.request.messages_json)
            run.set_answer(Answer.of(answer))
        return None
'''


def test_a_plugin_workflow_is_raced_with_the_grid_its_settings_declare(tmp_path: Path) -> None:
    """A workflow installed beside adapter_critic (a module and its entry point on PYTHONPATH) is a candidate of the
    installed command's `tune`, at its default and with the grid its `PerRequest` setting gives (2, and half: 1)."""
    (tmp_path / "echo_twice_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = tmp_path / "echo_twice_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-twice-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[adapter_critic.workflows]\necho_twice = echo_twice_plugin:EchoTwice\n")
    out = tmp_path / "out"
    command = [
        str(SCRIPT),
        "tune",
        str(DATASET),
        "--model",
        "demo-direct",
        "--techniques",
        "echo_twice",
        "-o",
        str(out),
    ]
    env = {**script_env(), "PYTHONPATH": str(tmp_path), "ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'r.db'}"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    entries = {e["label"]: e for e in pareto(out)["candidates"]}
    assert set(entries) == {"direct", "echo_twice", "echo_twice times=1"}
    assert entries["echo_twice"]["calls"] == 2 and entries["echo_twice times=1"]["calls"] == 1
