"""`adapter-critic eval` in-process against a config whose upstream is the scripted server: answers, scores,
statistics, tokens per stage, degraded and failed requests, scorers, and --resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ..conftest import RemoteUpstream
from .conftest import config_file, invoke, write_jsonl


def read_results(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {(row["id"], row["model"]): row for row in map(json.loads, lines)}


@pytest.fixture
def upstream(remote: RemoteUpstream) -> RemoteUpstream:
    return remote.reset()


def four_items(tmp_path: Path) -> Path:
    """The scripted upstream answers "echo MODEL: PROMPT": model-a is right on p1-p3, model-b on p4 only."""
    items = [{"id": f"q{i}", "prompt": f"p{i}", "expected": f"echo model-a: p{i}"} for i in (1, 2, 3)]
    items.append({"id": "q4", "prompt": "p4", "expected": "echo model-b: p4", "metadata": {"topic": "last"}})
    return write_jsonl(tmp_path / "data.jsonl", *items)


def test_scores_and_statistics_of_two_models(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(
        tmp_path, upstream.url, a={"mode": "direct", "model": "model-a"}, b={"mode": "direct", "model": "model-b"}
    )
    out = tmp_path / "out"
    result = invoke("eval", str(four_items(tmp_path)), "--models", "a,b", "-c", str(config), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    rows = read_results(out)
    assert len(rows) == 8
    assert rows[("q1", "a")]["answer"] == "echo model-a: p1" and rows[("q1", "a")]["score"] == 1.0
    assert rows[("q1", "b")]["score"] == 0.0 and rows[("q4", "b")]["score"] == 1.0
    assert rows[("q4", "a")]["metadata"] == {"topic": "last"}
    assert rows[("q2", "a")]["usage"] == {"api": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    assert rows[("q2", "a")]["run_id"].startswith("chatcmpl-") and rows[("q2", "a")]["latency_ms"] > 0
    assert sorted(call["body"]["model"] for call in upstream.calls()) == ["model-a"] * 4 + ["model-b"] * 4

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    a, b = summary["per_model"]["a"], summary["per_model"]["b"]
    assert (a["mean_score"], b["mean_score"]) == (0.75, 0.25)
    assert 0.0 <= a["ci95"][0] <= 0.75 <= a["ci95"][1] <= 1.0 and a["ci95"][0] < a["ci95"][1]
    assert a["tokens_per_item"] == {"api": 3} and a["errors"] == 0 and a["degraded"] == 0
    paired = summary["paired"]["b"]
    assert (paired["baseline"], paired["wins"], paired["ties"], paired["losses"]) == ("a", 1, 0, 3)
    assert paired["mean_difference"] == -0.5
    assert paired["p_sign"] == 0.625  # 2 * (C(4,0) + C(4,1)) / 2**4
    assert summary["complete"] is True and summary["interrupted"] is False
    assert (summary["endpoint"], summary["scorer"], summary["models"]) == (str(config), "exact", ["a", "b"])
    # The terminal table says the same.
    assert "0.75" in result.stdout and "0.25" in result.stdout and "1/0/3" in result.stdout
    assert "0.625" in result.stdout

    # Seeded: the same results give the same intervals.
    again = invoke("eval", str(four_items(tmp_path)), "--models", "a,b", "-c", str(config), "-o", str(tmp_path / "o2"))
    assert json.loads((tmp_path / "o2" / "summary.json").read_text())["per_model"]["a"]["ci95"] == a["ci95"]
    assert again.exit_code == 0


def test_tokens_per_stage_degraded_and_failed_requests(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(
        tmp_path,
        upstream.url,
        d={"mode": "direct", "model": "model-d"},
        c={"mode": "critic", "model": "model-c", "critic": "critic-model"},
    )
    items = [{"id": f"q{i}", "prompt": f"p{i}"} for i in (1, 2, 3)]
    dataset = write_jsonl(tmp_path / "data.jsonl", *items)
    error = json.dumps({"error": {"message": "scripted failure"}})
    upstream.script(
        {"model": "critic-model", "status": 500, "body": error},  # q1: the critic fails -> the draft, degraded
        {"model": "model-d", "status": 400, "body": error},  # q1: direct fails -> an error
    )
    out = tmp_path / "out"
    result = invoke("eval", str(dataset), "-m", "d,c", "-c", str(config), "-o", str(out), "-s", "regex:echo", "-j", "1")
    assert result.exit_code == 1
    assert "1 of 6 requests failed" in result.stderr and "scripted failure" in result.stderr
    rows = read_results(out)
    assert rows[("q1", "d")]["error"] is not None and rows[("q1", "d")]["score"] is None
    assert rows[("q1", "c")]["degraded"] is True and rows[("q1", "c")]["score"] == 1.0
    assert set(rows[("q2", "c")]["usage"]) == {"api_draft", "critic", "api_final"}
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    d, c = summary["per_model"]["d"], summary["per_model"]["c"]
    assert (d["errors"], d["degraded"], d["mean_score"]) == (1, 0, 2 / 3)  # a failed request scores 0
    assert (c["errors"], c["degraded"], c["mean_score"]) == (0, 1, 1.0)
    # The failed critic call reported no tokens and the degraded run made no final call.
    assert c["tokens_per_item"] == {"api_draft": 3, "critic": 2, "api_final": 3}
    assert c["total_tokens_per_item"] == 7
    # Calls, failed ones included: q1's draft and failed critic (2), q2's and q3's three each.
    assert (d["calls_per_item"], c["calls_per_item"]) == (1, 8 / 3)
    assert rows[("q2", "c")]["calls"] == 3 and rows[("q1", "d")]["calls"] is None
    assert summary["paired"]["c"]["wins"] == 1 and summary["paired"]["c"]["ties"] == 2

    # --resume runs only the failed pair again.
    before = len(upstream.calls())
    resumed = invoke(
        "eval", str(dataset), "-m", "d,c", "-c", str(config), "-o", str(out), "-s", "regex:echo", "--resume"
    )
    assert resumed.exit_code == 0, resumed.stderr
    assert [call["body"]["model"] for call in upstream.calls()[before:]] == ["model-d"]
    assert json.loads((out / "summary.json").read_text())["per_model"]["d"]["mean_score"] == 1.0
    assert len(read_results(out)) == 6


def test_cost_per_item_and_per_correct_answer_beside_the_score(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(
        tmp_path,
        upstream.url,
        a={"mode": "direct", "model": "model-a"},
        b={"mode": "critic", "model": "model-b", "critic": "critic-model"},
    )
    # Every call: 1 input and 2 output tokens, 0.0005 EUR at these prices; critic-model has no price.
    prices = '[pricing]\ncurrency = "EUR"\n[prices."model-*"]\ninput = 100.0\noutput = 200.0\n'
    config.write_text(config.read_text(encoding="utf-8") + prices, encoding="utf-8")
    out = tmp_path / "out"
    result = invoke("eval", str(four_items(tmp_path)), "--models", "a,b", "-c", str(config), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    rows = read_results(out)
    assert rows[("q1", "a")]["cost"]["total"] == pytest.approx(0.0005)
    assert rows[("q1", "b")]["cost"]["unknown_stages"] == ["critic"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    a, b = summary["per_model"]["a"]["cost"], summary["per_model"]["b"]["cost"]
    assert a == {
        "currency": "EUR",
        "total": pytest.approx(0.002),
        "total_known": pytest.approx(0.002),
        "unknown_items": 0,
        "per_item": pytest.approx(0.0005),
        "per_correct": pytest.approx(0.002 / 3),  # model-a is right on three of the four items
        "correct": 3,
    }
    # Each of b's runs has a stage without a price: its totals are unknown, the API calls' cost (2 a run) known.
    assert (b["total"], b["per_item"], b["per_correct"], b["unknown_items"]) == (None, None, None, 4)
    assert b["total_known"] == pytest.approx(0.004) and b["correct"] == 0
    table = [line for line in result.stdout.splitlines() if "│" in line or "┃" in line]
    assert "cost/item (EUR)" in table[0] and "cost/correct (EUR)" in table[0]
    a_row = next(line for line in table if line.startswith("│ a "))
    b_row = next(line for line in table if line.startswith("│ b "))
    assert [cell.strip() for cell in a_row.split("│")[5:7]] == ["0.0005", "0.000667"]
    assert [cell.strip() for cell in b_row.split("│")[5:7]] == ["≥ 0.001", "-"]  # a lower bound; nothing right


def test_without_prices_the_table_has_no_cost_columns(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(tmp_path, upstream.url, a={"mode": "direct", "model": "model-a"})
    out = tmp_path / "out"
    result = invoke("eval", str(four_items(tmp_path)), "--models", "a", "-c", str(config), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert "cost/" not in result.stdout
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["per_model"]["a"]["cost"] is None


def test_judge_scorer_reads_the_judges_reply_tolerantly(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(
        tmp_path, upstream.url, a={"mode": "direct", "model": "model-a"}, judge={"mode": "direct", "model": "judge"}
    )
    dataset = write_jsonl(
        tmp_path / "data.jsonl",
        {"id": "q1", "prompt": "p1", "expected": "the right answer"},
        {"id": "q2", "prompt": "p2", "rubric": "says echo"},
        {"id": "q3", "prompt": "p3", "rubric": "anything"},
    )
    upstream.script(
        {"model": "judge", "content": "Close, but it misses a detail.\n**Score:** 7/10"},
        {"model": "judge", "content": "Verdict: PASS"},
        {"model": "judge", "content": "I cannot tell."},
    )
    out = tmp_path / "out"
    result = invoke("eval", str(dataset), "-m", "a", "-c", str(config), "-o", str(out), "-s", "judge:judge", "-j", "1")
    rows = read_results(out)
    assert (rows[("q1", "a")]["score"], rows[("q2", "a")]["score"]) == (0.7, 1.0)
    assert "gave no score" in rows[("q3", "a")]["error"]
    assert result.exit_code == 1
    judged = [call["body"] for call in upstream.calls() if call["body"]["model"] == "judge"]
    assert (
        "the right answer" in judged[0]["messages"][-1]["content"]
        and "echo model-a: p1" in judged[0]["messages"][-1]["content"]
    )
    assert "says echo" in judged[1]["messages"][-1]["content"] and judged[0]["temperature"] == 0


def test_custom_and_json_scorers_and_request_params(
    tmp_path: Path, upstream: RemoteUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_eval_scorers.py").write_text(
        "def length(answer, item):\n    return len(answer) / 100, f\"{item['id']} is {len(answer)} long\"\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    config = config_file(tmp_path, upstream.url, a={"mode": "direct", "model": "model-a"})
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    dataset = write_jsonl(
        tmp_path / "data.jsonl",
        {"id": "fenced", "prompt": "x", "scorer": "json", "schema": schema, "params": {"temperature": 0.5}},
        {"id": "wrong", "prompt": "x", "scorer": "json", "schema": schema},
        {"id": "text", "prompt": "x", "scorer": "json"},
        {"id": "custom", "prompt": "twelve chars"},
    )
    upstream.script(
        {"model": "model-a", "content": '```json\n{"city": "Oslo"}\n```'},
        {"model": "model-a", "content": '{"city": 3}'},
    )
    out = tmp_path / "out"
    args = ("eval", str(dataset), "-m", "a", "-c", str(config), "-o", str(out), "-j", "1")
    result = invoke(*args, "-s", "my_eval_scorers:length")
    assert result.exit_code == 0, result.stderr
    rows = read_results(out)
    assert rows[("custom", "a")]["score"] == len("echo model-a: twelve chars") / 100
    assert rows[("custom", "a")]["note"] == "custom is 26 long"
    assert rows[("fenced", "a")]["score"] == 1.0
    assert rows[("wrong", "a")]["score"] == 0.0 and "city" in rows[("wrong", "a")]["note"]
    assert rows[("text", "a")]["score"] == 0.0 and rows[("text", "a")]["note"].startswith("not JSON")
    assert [call["body"].get("temperature") for call in upstream.calls()] == [0.5, None, None, None]


def test_bad_inputs_are_one_line(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(tmp_path, upstream.url, a={"mode": "direct", "model": "model-a"})
    good = write_jsonl(tmp_path / "good.jsonl", {"id": "q1", "prompt": "p1", "expected": "x"})
    cases = {
        "no expected": (
            write_jsonl(tmp_path / "a.jsonl", {"id": 1, "prompt": "p"}),
            "exact",
            ":1: scorer 'exact' needs",
        ),
        "both": (write_jsonl(tmp_path / "b.jsonl", {"prompt": "p", "messages": []}), "json", ":1: give either"),
        "bad scorer": (good, "nope", "--scorer: unknown scorer 'nope'"),
        "bad module": (good, "no_such_module:f", "cannot import 'no_such_module'"),
    }
    for name, (dataset, scorer, said) in cases.items():
        result = invoke("eval", str(dataset), "-m", "a", "-c", str(config), "-s", scorer, "-o", str(tmp_path / "o"))
        assert result.exit_code == 1, name
        assert said in result.stderr, (name, result.stderr)
    duplicate = write_jsonl(tmp_path / "d.jsonl", {"id": 1, "prompt": "p"}, {"id": "1", "prompt": "q"})
    result = invoke("eval", str(duplicate), "-m", "a", "-c", str(config), "-s", "json")
    assert "d.jsonl:2: id '1' is already used on line 1" in result.stderr
    both = invoke("eval", str(good), "-m", "a", "-c", str(config), "--base-url", upstream.url)
    assert "not both" in both.stderr and both.exit_code == 1
    assert upstream.calls() == []


def test_the_example_custom_scorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).parents[2])  # the repository's root, as the example says
    dataset = write_jsonl(tmp_path / "d.jsonl", {"id": "short", "prompt": "Hi", "metadata": {"max_words": 12}})
    out = tmp_path / "out"
    scorer = "examples.eval.scorers:brevity"
    result = invoke("eval", str(dataset), "-m", "demo-direct,demo-critic", "-s", scorer, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    direct, critic = read_results(out)[("short", "demo-direct")], read_results(out)[("short", "demo-critic")]
    assert (direct["score"], direct["note"]) == (1.0, "12 words (limit 12)")
    assert (critic["score"], critic["note"]) == (pytest.approx(2 - 17 / 12), "17 words (limit 12)")  # revised: longer


def test_calls_per_item_count_a_nested_runs_calls(tmp_path: Path, upstream: RemoteUpstream) -> None:
    """A stage run by another served model makes that model's calls: `outer`'s critique is `inner`'s critic run."""
    base = f"{upstream.url}/v1"
    config = tmp_path / "config.toml"
    config.write_text(
        "retries = 0\n"
        "[served_models.inner]\n"
        'mode = "critic"\n'
        f'api = {{ model = "inner-model", base_url = "{base}" }}\n'
        f'critic = {{ model = "critic-model", base_url = "{base}" }}\n'
        "[served_models.outer]\n"
        'mode = "critic"\n'
        f'api = {{ model = "outer-model", base_url = "{base}" }}\n'
        'critic = { served = "inner" }\n',
        encoding="utf-8",
    )
    dataset = write_jsonl(tmp_path / "data.jsonl", {"id": "q1", "prompt": "p1"})
    out = tmp_path / "out"
    result = invoke("eval", str(dataset), "-m", "outer,inner", "-c", str(config), "-o", str(out), "-s", "regex:.")
    assert result.exit_code == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # outer: its draft, inner's three calls as its critique, its final answer.
    assert summary["per_model"]["outer"]["calls_per_item"] == 5
    assert summary["per_model"]["inner"]["calls_per_item"] == 3
    assert len(upstream.calls()) == 8
