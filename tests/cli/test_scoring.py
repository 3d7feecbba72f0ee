"""The eval's statistics, the judge's tolerant reading, and dataset lines (units)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from adapter_critic.evals.dataset import DatasetError, load_dataset
from adapter_critic.evals.scorers import parse_judgement
from adapter_critic.evals.stats import bootstrap_ci, paired, percentile, sign_test


def test_statistics() -> None:
    assert bootstrap_ci([0.5] * 7) == (0.5, 0.5)
    low, high = bootstrap_ci([0, 1] * 50)
    assert 0.38 < low < 0.5 < high < 0.62  # about 0.5 plus or minus 1.96 standard errors of 0.05
    assert bootstrap_ci([0, 1, 1]) == bootstrap_ci([0, 1, 1])  # seeded
    assert all(math.isnan(bound) for bound in bootstrap_ci([]))
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([10], 95) == 10
    assert percentile(list(range(101)), 95) == 95
    assert sign_test(0, 6) == 2 / 64 and sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    comparison = paired([1, 1, 0, 0.5], [0, 1, 1, 0.5])
    assert (comparison.wins, comparison.ties, comparison.losses, comparison.mean_difference) == (1, 2, 1, 0.0)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Good.\nSCORE: 8", 0.8),
        ("**Score**: 7/10", 0.7),
        ("score = 4 out of 5", 0.8),
        ("I'd give it 3/4.", 0.75),
        ("9", 0.9),
        ("0.25", 0.25),
        ("The answer is correct.", 1.0),
        ("Incorrect: it names the wrong city.", 0.0),
        ("Verdict: FAIL", 0.0),
        ("SCORE: 12", 1.0),
        ("no idea", None),
    ],
)
def test_judge_replies_are_read_tolerantly(reply: str, score: float | None) -> None:
    assert parse_judgement(reply) == score


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"id": "a"}', "d.jsonl:2: give either `messages` or `prompt`"),
        ('{"id": "a", "prompt": "p", "params": {"model": "x"}}', "d.jsonl:2: params.model: set by the eval"),
        ('{"id": "a", "messages": [{"role": 1}]}', "d.jsonl:2: messages[0].role: Expected `str`"),
        ('{"id": [1], "prompt": "p"}', "d.jsonl:2: id: Expected `int | str | null`, got `array`"),
        ("[1, 2]", "d.jsonl:2: an item must be a JSON object"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(DatasetError) as raised:
        load_dataset(path)
    assert str(raised.value).startswith(f"{path}:{said.partition(':')[2]}")


def test_dataset_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '\n// a comment\n{"prompt": "p", "expected": ["a", "b"]}\n{"id": 7, "messages": [{"role": "user"}]}\n'
    )
    first, second = load_dataset(path)
    assert (first.id, first.line, first.messages) == ("line-3", 3, [{"role": "user", "content": "p"}])
    assert first.expected_list() == ["a", "b"] and second.id == "7"
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="has no items"):
        load_dataset(tmp_path / "empty.jsonl")


def test_progress_is_a_bar_on_a_terminal_and_lines_otherwise() -> None:
    import io

    from rich.console import Console

    from adapter_critic.cli.eval_report import Progress
    from adapter_critic.evals.results import Result

    results = [Result(id="q1", model="m", scorer="exact", score=1.0, latency_ms=12.0)]
    results.append(Result(id="q2", model="m", scorer="exact", error="the server answered HTTP 500"))
    terminal = io.StringIO()
    with Progress(Console(file=terminal, force_terminal=True, width=100), total=4, done=1) as progress:
        for result in results:
            progress.advance(result)
    drawn = terminal.getvalue()
    assert "3/4" in drawn and "1 errors" in drawn and "━" in drawn  # items done, errors, the bar
    plain = io.StringIO()
    with Progress(Console(file=plain, force_terminal=False, width=100), total=4, done=1) as progress:
        for result in results:
            progress.advance(result)
    assert plain.getvalue().splitlines() == [
        "resuming: 1 of 4 already done",
        "[2/4] m q1: score 1 (12 ms)",
        "[3/4] m q2: error: the server answered HTTP 500",
    ]
