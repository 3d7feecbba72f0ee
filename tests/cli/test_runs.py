"""`adapter-critic runs list|show|export` and `replay` over the run store a real `adapter-critic serve` recorded."""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from adapter_critic.cli.errors import CliError
from adapter_critic.cli.replay import request_of
from adapter_critic.store.records import RunDetail, StoredRequest

from ..conftest import RemoteUpstream, listening_socket, sdk
from ..helpers import usage
from .conftest import EXAMPLES, SCRIPT, config_file, invoke, one_error_line, script_env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A store with three runs of a real server (demo-critic, demo-direct, demo-adapter, in that order), stopped
    gracefully so that every run is written."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'runs.db'}"
    serve_and_ask(url, None, [("demo-critic", "Hello!"), ("demo-direct", "Bye"), ("demo-adapter", "Hi again")])
    yield url


def serve_and_ask(url: str, config: Path | None, asked: list[tuple[str, str]]) -> None:
    """A real `adapter-critic serve` (the demo, or `config`) recording to `url`: asked each (model, text) with the
    openai SDK, then stopped gracefully so that every run is written."""
    sock = listening_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    args = [str(SCRIPT), "serve", "--fd", str(sock.fileno()), "--log-level", "warning"]
    if config is not None:
        args += ["--config", str(config)]
    env = {**script_env(), "ADAPTER_CRITIC_STORE": url}
    server = subprocess.Popen(args, pass_fds=(sock.fileno(),), env=env, stderr=subprocess.PIPE, text=True)
    sock.close()
    try:
        client = sdk(openai.OpenAI(base_url=base, api_key="unused", max_retries=0))
        for model, text in asked:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], temperature=0.3)
    finally:
        server.send_signal(signal.SIGINT)  # a graceful stop writes what is queued
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err


PRICES = '[pricing]\ncurrency = "EUR"\n[prices."api-model"]\ninput = 2.0\noutput = 8.0\n'


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory, remote: RemoteUpstream) -> str:
    """A store with two runs of a server with prices: `p-direct` (every stage priced: 0.0028 EUR), then `p-critic`
    (its critic's model has no price: 0.0056 EUR known, the total unknown)."""
    directory = tmp_path_factory.mktemp("priced")
    url = f"sqlite:///{directory / 'runs.db'}"
    upstream = remote.reset()
    config = config_file(
        directory,
        upstream.url,
        **{
            "p-direct": {"mode": "direct", "model": "api-model"},
            "p-critic": {"mode": "critic", "model": "api-model", "critic": "unpriced-model"},
        },
    )
    config.write_text(config.read_text(encoding="utf-8") + PRICES, encoding="utf-8")
    upstream.script(*({"model": "api-model", "usage": usage(1000, 100)} for _ in range(3)))
    serve_and_ask(url, config, [("p-direct", "Hello"), ("p-critic", "Hello")])
    return url


def test_list_shows_and_filters_by_cost(priced: str) -> None:
    table = invoke("runs", "list", "--store", priced)
    assert table.exit_code == 0, table.stderr
    rows = {row["served model"]: row for row in table_rows(table.stdout)}
    assert (rows["p-direct"]["cost (EUR)"], rows["p-critic"]["cost (EUR)"]) == ("0.0028", "≥ 0.0056")
    assert [run["served_model"] for run in listed(priced, "--min-cost", "0.003")] == ["p-critic"]
    assert [run["served_model"] for run in listed(priced, "--min-cost", "0")] == ["p-critic", "p-direct"]
    assert listed(priced, "--min-cost", "0.01") == []
    refused = invoke("runs", "list", "--store", priced, "--min-cost", "-1")
    assert refused.exit_code == 2 and "--min-cost" in refused.stderr


def test_show_and_export_say_what_a_run_cost(priced: str, tmp_path: Path) -> None:
    run_id = str(listed(priced, "--served-model", "p-critic")[0]["id"])
    shown = invoke("runs", "show", run_id, "--store", priced)
    assert shown.exit_code == 0, shown.stderr
    assert "cost: ≥ 0.0056 EUR (unknown for critic)" in shown.stdout
    costs = [(row["stage"], row["cost (EUR)"]) for row in table_rows(shown.stdout)]
    assert costs == [("api_draft", "0.0028"), ("critic", "?"), ("api_final", "0.0028")]
    out = tmp_path / "runs.csv"
    assert invoke("runs", "export", "--store", priced, "-o", str(out)).exit_code == 0
    rows = {row["served_model"]: row for row in csv.DictReader(io.StringIO(out.read_text(encoding="utf-8")))}
    assert {k: rows["p-direct"][k] for k in ("cost_currency", "cost_total", "cost_known", "cost_unknown_stages")} == {
        "cost_currency": "EUR", "cost_total": "0.0028", "cost_known": "0.0028", "cost_unknown_stages": ""
    }  # fmt: skip
    assert (rows["p-critic"]["cost_total"], rows["p-critic"]["cost_unknown_stages"]) == ("", "critic")


def test_runs_of_a_server_without_prices_have_no_cost_column(recorded: str) -> None:
    table = invoke("runs", "list", "--store", recorded)
    assert table.exit_code == 0 and "demo-critic" in table.stdout and "cost" not in table.stdout


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first Rich table in `text`, by its column headers."""
    lines = text.splitlines()
    header = [cell.strip() for cell in next(line for line in lines if "┃" in line).split("┃")[1:-1]]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    return [dict(zip(header, row, strict=True)) for row in rows]


def listed(url: str, *args: str) -> list[dict[str, object]]:
    result = invoke("runs", "list", "--store", url, "--json", *args)
    assert result.exit_code == 0, result.stderr
    data: list[dict[str, object]] = json.loads(result.stdout)["data"]
    return data


def test_list_filters_and_pages(recorded: str) -> None:
    assert [run["served_model"] for run in listed(recorded)] == ["demo-adapter", "demo-direct", "demo-critic"]
    assert [run["mode"] for run in listed(recorded, "--mode", "critic")] == ["critic"]
    assert [run["served_model"] for run in listed(recorded, "--served-model", "demo-direct")] == ["demo-direct"]
    assert listed(recorded, "--degraded") == [] and len(listed(recorded, "--status", "ok")) == 3
    assert listed(recorded, "--since", "2100-01-01") == []
    first = invoke("runs", "list", "--store", recorded, "--limit", "2")
    assert first.exit_code == 0 and "demo-adapter" in first.stdout and "demo-critic" not in first.stdout
    cursor = first.stdout.split("--cursor ")[1].split()[0]
    rest = invoke("runs", "list", "--store", recorded, "--cursor", cursor)
    assert "demo-critic" in rest.stdout and "demo-adapter" not in rest.stdout


def test_the_next_page_keeps_every_option_given(recorded: str) -> None:
    options = ["--store", recorded, "--status", "ok", "--not-degraded", "--since", "2000-01-01T00:00Z", "--limit", "1"]
    seen = []
    args = ["runs", "list", *options]
    while True:
        page = invoke(*args)
        assert page.exit_code == 0, page.stderr
        seen += [model for model in ("demo-adapter", "demo-direct", "demo-critic") if model in page.stdout]
        more = [line.removeprefix("more: ") for line in page.stdout.splitlines() if line.startswith("more: ")]
        if not more:
            break
        command = shlex.split(more[0])
        assert command[:3] == ["adapter-critic", "runs", "list"] and command[3:-2] == options
        args = command[1:]
    assert seen == ["demo-adapter", "demo-direct", "demo-critic"]  # one run a page, as --limit 1 asked


def test_show_a_run(recorded: str) -> None:
    run_id = listed(recorded, "--mode", "critic")[0]["id"]
    shown = invoke("runs", "show", str(run_id), "--store", recorded)
    assert shown.exit_code == 0
    for said in ("api_draft", "critic", "api_final", "user: Hello!", "revised after the demo critic"):
        assert said in shown.stdout
    detail = json.loads(invoke("runs", "show", str(run_id), "--store", recorded, "--json").stdout)
    assert [stage["stage"] for stage in detail["stages"]] == ["api_draft", "critic", "api_final"]
    assert detail["request"]["options"] == {"temperature": 0.3}


def test_export_jsonl_and_csv(recorded: str, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    result = invoke("runs", "export", "--store", recorded, "-o", str(out))
    assert result.exit_code == 0 and "3 runs written" in result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [row["served_model"] for row in rows] == ["demo-adapter", "demo-direct", "demo-critic"]
    assert all(int(row["total_tokens"]) > 0 and row["status"] == "ok" for row in rows)
    lines = invoke("runs", "export", "--store", recorded, "--mode", "adapter").stdout.splitlines()
    assert len(lines) == 1
    run = json.loads(lines[0])
    assert run["served_model"] == "demo-adapter" and [s["stage"] for s in run["stages"]] == ["api", "adapter"]


def test_replay_to_another_model(recorded: str) -> None:
    run_id = str(listed(recorded, "--mode", "critic")[0]["id"])
    result = invoke("replay", run_id, "--model", "demo-direct", "--store", recorded)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "demo-critic (recorded)" in out and "demo-direct (now" in out
    assert "-Demo model, revised after the demo critic's review" in out  # the diff
    assert "+Demo model draft (this is not a real LLM)." in out
    assert "total tokens" in out and "latency ms" in out
    same = invoke("replay", run_id, "--model", "demo-critic", "--store", recorded)
    assert "the answers are identical" in same.stdout


def test_store_and_run_mistakes_are_one_line(recorded: str, tmp_path: Path) -> None:
    cases = [
        (("runs", "show", "nope", "--store", recorded), "no run 'nope' in the run store"),
        (("runs", "list", "--store", f"sqlite:///{tmp_path / 'none.db'}"), "no runs recorded at"),
        (("runs", "list", "--store", "mysql://h/db"), "mysql"),
        (("runs", "list", "--store", recorded, "--since", "yesterday"), "--since: 'yesterday' is not a time"),
        (("runs", "list", "--store", recorded, "--cursor", "garbage"), "--cursor: 'garbage' is not a cursor"),
        (("replay", "nope", "-m", "demo-direct", "--store", recorded), "no run 'nope'"),
    ]
    for args, said in cases:
        assert said in one_error_line(invoke(*args)), args
    run_id = str(listed(recorded)[0]["id"])
    unknown = invoke("replay", run_id, "-m", "gpt-9", "--store", recorded)
    assert "does not serve 'gpt-9'" in one_error_line(unknown)


# Imported first by every Python process with this directory on PYTHONPATH: asyncpg as if not installed.
NO_ASYNCPG = """
import sys


class NoAsyncpg:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "asyncpg":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoAsyncpg())
"""


def test_a_postgres_store_without_its_driver_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(NO_ASYNCPG, encoding="utf-8")
    env = script_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    url = "postgresql://user@127.0.0.1:9/runs"
    said = "a postgresql run store needs the postgres extra (asyncpg): pip install 'adapter_critic[postgres]'"
    for args in (
        ["runs", "list", "--store", url],
        ["eval", str(EXAMPLES / "eval" / "demo.jsonl"), "-m", "demo-direct", "-o", str(tmp_path / "o")],
    ):
        result = subprocess.run(
            [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env={**env, "ADAPTER_CRITIC_STORE": url}
        )
        assert one_error_line(result).endswith(said), args


def test_a_run_without_its_messages_cannot_be_replayed() -> None:
    run = RunDetail(
        id="r1", request_id="r1", served_model="m", mode="direct", stream=False, status="ok", degraded=False,
        started_at="2026-11-25T00:00:00.000Z", capture="metadata", request=StoredRequest(options={"seed": 1}),
    )  # fmt: skip
    with pytest.raises(CliError, match="capture = metadata"):
        request_of(run)
    full = RunDetail(**{**{f: getattr(run, f) for f in run.__struct_fields__}, "capture": "full"})
    full.request = StoredRequest(options={"seed": 1, "stream": True}, messages=[{"role": "user", "content": "x"}])
    assert request_of(full) == {"seed": 1, "messages": [{"role": "user", "content": "x"}]}
