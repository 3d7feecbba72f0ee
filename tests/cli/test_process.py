"""The installed `adapter-critic` console script in subprocesses: --version, the offline demo eval, serve with a
real client, eval against a base URL with retries, Ctrl-C and --resume, and bad inputs as one line."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from adapter_critic import __version__

from ..conftest import RemoteUpstream, listening_socket, sdk
from .conftest import EXAMPLES, SCRIPT, Lines, config_file, one_error_line, run, script_env, write_jsonl


@pytest.fixture
def upstream(remote: RemoteUpstream) -> RemoteUpstream:
    return remote.reset()


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def chat_calls(upstream: RemoteUpstream) -> list[dict[str, Any]]:
    return [call for call in upstream.calls() if call["path"].endswith("/chat/completions")]


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"adapter-critic {__version__}"


def test_demo_eval_runs_offline(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("eval", str(EXAMPLES / "eval" / "demo.jsonl"), "--models", "demo-direct,demo-critic", "-o", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["per_model"]["demo-direct"]["mean_score"] == 0.6
    assert summary["per_model"]["demo-critic"]["mean_score"] == 0.7
    assert summary["paired"]["demo-critic"]["wins"] == 3 and summary["paired"]["demo-critic"]["losses"] == 2
    assert set(summary["per_model"]["demo-critic"]["tokens_per_item"]) == {"api_draft", "critic", "api_final"}
    assert "demo-critic" in result.stdout and "win/tie/loss" in result.stdout
    # Not a terminal: one plain line per result on stderr.
    assert result.stderr.count("\n") == 20 and "[20/20]" in result.stderr


def test_scorer_scores_the_lines_that_name_none_and_says_when_lines_keep_their_own(tmp_path: Path) -> None:
    plain = str(EXAMPLES / "eval" / "plain.jsonl")  # no line names a scorer
    means = {}
    for scorer in ("exact", "contains"):
        out = tmp_path / scorer
        result = run("eval", plain, "-m", "demo-direct,demo-critic", "--scorer", scorer, "-o", str(out))
        assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        means[scorer] = {model: stats["mean_score"] for model, stats in summary["per_model"].items()}
    assert means == {
        "exact": {"demo-direct": 0.125, "demo-critic": 0.0},  # only the verbatim draft
        "contains": {"demo-direct": 0.375, "demo-critic": 0.625},  # the critic's answer names its review
    }
    mixed = write_jsonl(
        tmp_path / "mixed.jsonl",
        {"id": "a", "prompt": "p", "expected": "x", "scorer": "contains"},
        {"id": "b", "prompt": "p", "expected": "x"},
    )
    demo = EXAMPLES / "eval" / "demo.jsonl"
    for dataset, said in [
        (demo, f"warning: 10 of 10 lines of {demo} keep their own scorer (a line's \"scorer\" wins); --scorer "
         "contains scores none of them"),
        (mixed, f"warning: 1 of 2 lines of {mixed} keep their own scorer (a line's \"scorer\" wins); --scorer "
         "contains scores the other 1"),
    ]:  # fmt: skip
        result = run("eval", str(dataset), "-m", "demo-direct", "--scorer", "contains", "-o", str(tmp_path / "o"))
        assert result.stderr.splitlines()[0] == said
    assert "warning" not in run("eval", str(mixed), "-m", "demo-direct", "-o", str(tmp_path / "o")).stderr


def test_an_in_process_eval_records_its_runs_in_the_run_store(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dataset = str(EXAMPLES / "eval" / "demo.jsonl")
    result = run("eval", dataset, "--models", "demo-critic", "--limit", "2", "-o", str(out))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2
    # No --store: where the standalone server records by default, which `runs` reads by default.
    assert "runs recorded to sqlite+aiosqlite:///" in result.stdout
    for row in rows:
        shown = run("runs", "show", row["run_id"], "--json")
        assert shown.returncode == 0, shown.stderr
        detail = json.loads(shown.stdout)
        assert detail["id"] == row["run_id"] and detail["served_model"] == "demo-critic"
        assert [stage["stage"] for stage in detail["stages"]] == ["api_draft", "critic", "api_final"]
        assert detail["answer"]["content"] == row["answer"]


def test_bad_inputs_are_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "prompt": "p", "expected": "x"}\n{"id": 2, "prompt": \n', encoding="utf-8")
    good = write_jsonl(tmp_path / "good.jsonl", {"id": 1, "prompt": "p", "expected": "x"})
    port = closed_port()
    store_config = tmp_path / "store.toml"
    store_config.write_text(
        f'[served_models.x]\nmode = "direct"\napi = {{ model = "m", base_url = "http://127.0.0.1:{port}/v1" }}\n'
        f'[store]\nurl = "postgresql://user:secret@127.0.0.1:{port}/runs"\n',
        encoding="utf-8",
    )
    cases = [
        (("eval", str(tmp_path / "missing.jsonl"), "-m", "demo-direct"), "missing.jsonl: no such dataset"),
        (("eval", str(bad), "-m", "demo-direct"), "bad.jsonl:2: not valid JSON"),
        (("eval", str(good), "-m", "demo-direct,gpt-9"), "the built-in demo does not serve 'gpt-9'"),
        (
            ("eval", str(good), "-m", "x", "-c", str(store_config)),
            f"cannot open the run store postgresql://***@127.0.0.1:{port}/runs: ConnectionRefusedError",
        ),
        (
            ("eval", str(good), "-m", "x", "--base-url", f"http://127.0.0.1:{port}/v1"),
            f"http://127.0.0.1:{port}/v1 cannot be reached: could not connect to 127.0.0.1:{port} (connection refused)",
        ),
    ]
    for args, said in cases:
        result = run(*args, "-o", str(tmp_path / "o"))
        assert said in one_error_line(result), (args, result.stderr)
        assert result.returncode == 1


def test_a_wrong_option_is_one_line_too() -> None:
    result = run("eval", "data.jsonl")
    assert result.returncode == 2
    assert one_error_line(result) == "Error: Missing option '--models' / '-m'. (see adapter-critic eval --help)"


def test_serve_answers_the_sdk_and_eval_through_a_base_url(tmp_path: Path) -> None:
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    args = [str(SCRIPT), "serve", "--fd", str(sock.fileno()), "--log-level", "warning"]
    server = subprocess.Popen(args, pass_fds=(sock.fileno(),), env=script_env(), stderr=subprocess.PIPE, text=True)
    sock.close()
    try:
        client = sdk(openai.OpenAI(base_url=url, api_key="unused", max_retries=0))
        reply = client.chat.completions.create(model="demo-critic", messages=[{"role": "user", "content": "Hi"}])
        assert "revised after the demo critic" in (reply.choices[0].message.content or "")
        out = tmp_path / "out"
        dataset = str(EXAMPLES / "eval" / "demo.jsonl")
        result = run("eval", dataset, "-m", "demo-direct,demo-critic", "--base-url", url, "-o", str(out))
        assert result.returncode == 0, result.stderr
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        assert summary["per_model"]["demo-critic"]["mean_score"] == 0.7  # as in-process
        assert summary["per_model"]["demo-critic"]["tokens_per_item"]["critic"] > 0
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=20)
    assert server.returncode == 0 and "Traceback" not in err


def test_serve_takes_its_config_and_workers(tmp_path: Path, upstream: RemoteUpstream) -> None:
    config = config_file(tmp_path, upstream.url, mine={"mode": "direct", "model": "model-a"})
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    args = [str(SCRIPT), "serve", "-c", str(config), "--workers", "2", "--fd", str(sock.fileno())]
    server = subprocess.Popen(args, pass_fds=(sock.fileno(),), env=script_env(), stderr=subprocess.PIPE, text=True)
    sock.close()
    try:
        client = sdk(openai.OpenAI(base_url=url, api_key="unused", max_retries=0))
        assert [model.id for model in client.models.list()] == ["mine"]
        reply = client.chat.completions.create(model="mine", messages=[{"role": "user", "content": "Hi"}])
        assert reply.choices[0].message.content == "echo model-a: Hi"
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert "Traceback" not in err


def test_base_url_requests_follow_the_retry_rules(tmp_path: Path, upstream: RemoteUpstream) -> None:
    error = json.dumps({"error": {"message": "busy"}})
    upstream.script({"status": 503, "body": error, "headers": {"retry-after": "0"}})
    dataset = write_jsonl(tmp_path / "d.jsonl", {"id": "q1", "prompt": "p1", "expected": "echo upstream-model: p1"})
    base = ("eval", str(dataset), "-m", "upstream-model", "--base-url", f"{upstream.url}/v1", "-o", str(tmp_path / "o"))
    result = run(*base, "--retries", "1")
    assert result.returncode == 0, result.stderr
    assert len(chat_calls(upstream)) == 2  # the 503, then the answer
    upstream.reset().script({"status": 400, "body": error})
    refused = run(*base)
    assert len(chat_calls(upstream)) == 1  # a 400 is never retried
    last = refused.stderr.strip().splitlines()[-1]  # after the progress line of the failed request
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert last.startswith("Error: 1 of 1 requests failed") and "answered HTTP 400: busy" in last


def test_ctrl_c_keeps_what_was_done_and_resume_finishes(tmp_path: Path, upstream: RemoteUpstream) -> None:
    items = [{"id": f"q{i}", "prompt": f"p{i}", "expected": "echo"} for i in range(1, 6)]
    dataset = write_jsonl(tmp_path / "d.jsonl", *items)
    upstream.script({"content": "echo quick"}, {"content": "echo slow", "delay": 60})
    out = tmp_path / "out"
    args = [str(SCRIPT), "eval", str(dataset), "-m", "upstream-model", "-s", "contains", "-j", "1", "-o", str(out)]
    args += ["--base-url", f"{upstream.url}/v1"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env())
    assert process.stderr is not None and process.stdout is not None
    lines = Lines(process.stderr)
    lines.wait_for(lambda line: line.startswith("[1/5]"))
    assert upstream.holding(count=1, wait=20) == 1  # the second request is held by the upstream (its `delay`)
    assert len(chat_calls(upstream)) == 2
    process.send_signal(signal.SIGINT)
    stdout = process.stdout.read()
    stderr = lines.rest()
    assert process.wait(timeout=20) == 130
    process.stdout.close()
    process.stderr.close()
    assert "interrupted: 1 of 5 done; --resume continues" in stderr and "Traceback" not in stderr
    assert "upstream-model" in stdout  # the table of what was done
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(row["id"], row["answer"]) for row in rows] == [("q1", "echo quick")]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["interrupted"] is True and summary["complete"] is False
    assert summary["per_model"]["upstream-model"]["items"] == 1
    assert len(upstream.aborted(wait=10)) == 1  # the request in flight was cancelled, not left running

    resumed = run(*args[1:], "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming: 1 of 5 already done" in resumed.stderr
    asked = [call["body"]["messages"][-1]["content"] for call in chat_calls(upstream)]
    assert asked == ["p1", "p2", "p2", "p3", "p4", "p5"]  # q1 is not asked again
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is True and summary["per_model"]["upstream-model"]["mean_score"] == 1.0
