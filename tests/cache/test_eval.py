"""`eval --cache` and `replay --cache`: a re-run eval is answered from the cache of its served models, without an
upstream call, and says so per item and per model; a replayed run is too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..cli.conftest import invoke, write_jsonl
from ..conftest import RemoteUpstream


def _config(tmp_path: Path, upstream_url: str) -> Path:
    path = tmp_path / "eval.toml"
    path.write_text(
        f"""
retries = 0
[store]
url = "sqlite:///{tmp_path / "runs.sqlite3"}"

[served_models.cached]
mode = "direct"
api = {{ model = "model-a", base_url = "{upstream_url}/v1" }}
cache = true
""",
        encoding="utf-8",
    )
    return path


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def test_a_cached_eval_run_again_calls_no_upstream(tmp_path: Path, upstream_url: str) -> None:
    scripted = RemoteUpstream(upstream_url).reset()
    config = _config(tmp_path, upstream_url)
    items = [{"id": f"q{i}", "prompt": f"p{i}", "expected": f"echo model-a: p{i}"} for i in (1, 2)]
    data = write_jsonl(tmp_path / "data.jsonl", *items)
    runs = [tmp_path / "first", tmp_path / "second"]
    for out in runs:
        result = invoke("eval", str(data), "-m", "cached", "-c", str(config), "-o", str(out), "--cache")
        assert result.exit_code == 0, result.stderr
    assert len(scripted.calls()) == 2  # the first eval's; the second was answered from the cache
    first, second = _rows(runs[0]), _rows(runs[1])
    assert all(row["cached_from"] is None and row["score"] == 1.0 for row in first.values())
    for item in ("q1", "q2"):
        assert second[item]["cached_from"] == first[item]["run_id"] != second[item]["run_id"]
        assert (second[item]["answer"], second[item]["score"]) == (first[item]["answer"], 1.0)
        assert second[item]["total_usage"] == first[item]["total_usage"]  # what the answer took when it was made
    summary = json.loads((runs[1] / "summary.json").read_text(encoding="utf-8"))
    assert summary["per_model"]["cached"]["cache_hits"] == 2
    assert "cached" in result.stdout
    # Without --cache (and without temperature 0) nothing is looked up: the upstream answers again.
    again = invoke("eval", str(data), "-m", "cached", "-c", str(config), "-o", str(tmp_path / "third"))
    assert again.exit_code == 0 and len(scripted.calls()) == 4
    assert all(row["cached_from"] is None for row in _rows(tmp_path / "third").values())

    run_id = first["q1"]["run_id"]
    store = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    replayed = invoke("replay", run_id, "-m", "cached", "-c", str(config), "--store", store, "--cache")
    assert replayed.exit_code == 0, replayed.stderr
    assert f"answered from the cache: the answer of run {run_id}" in replayed.stdout
    assert "the answers are identical" in replayed.stdout and len(scripted.calls()) == 4
