"""The proof on a known mix (docs/guides/routing.md#a-known-mix): on the demo model, sums pay for self-consistency,
questions about a review for the critic, and anything else is answered right directly. `tune` measures the three
techniques on one dataset, `route fit` learns the demo's auto model's policy from it, and `eval` on another dataset
of the same kinds shows the auto model above every single candidate: a better score than each (paired sign test),
and a better score for its cost at every effort. The guide's table and plot are this run's."""

from __future__ import annotations

import json
from pathlib import Path

from adapter_critic.demo import DEMO_MODEL
from adapter_critic.evals.weighed import score_for_cost

from ..cli.conftest import EXAMPLES, invoke

CANDIDATES = [f"direct-{DEMO_MODEL}", f"self_consistency-{DEMO_MODEL}", f"critic-{DEMO_MODEL}"]
FIGURE = Path(__file__).parents[2] / "docs" / "images" / "routing-mix.svg"


def test_the_auto_model_beats_every_single_candidate_on_a_known_mix(tmp_path: Path) -> None:
    env = {"ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}
    techniques = "direct,self_consistency,critic"
    tuned = invoke("tune", str(EXAMPLES / "eval" / "tune.jsonl"), "--model", "demo-direct", "--techniques",
                   techniques, "--no-chains", "--output-dir", str(tmp_path / "tuned"), env=env)  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    fitted = invoke("route", "fit", "demo-auto", "--tune", str(tmp_path / "tuned"), env=env)
    assert fitted.exit_code == 0, fitted.output
    out = tmp_path / "mix"
    evaluated = invoke("eval", str(EXAMPLES / "eval" / "mix.jsonl"), "-m", ",".join(["demo-auto", *CANDIDATES]),
                       "--effort", "0.5", "-o", str(out), env=env)  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    summary = json.loads((out / "summary.json").read_text())
    scores = {model: stats["mean_score"] for model, stats in summary["per_model"].items()}
    for candidate in CANDIDATES:
        assert scores["demo-auto"] > scores[candidate]
        paired = summary["paired"][candidate]  # against the first model, the auto one
        assert paired["baseline"] == "demo-auto" and paired["mean_difference"] < 0 and paired["p_sign"] < 0.05
    for effort in (0.0, 0.5, 1.0):
        weighed = {m: f["weighed"] for m, f in score_for_cost(summary, effort)["per_model"].items()}
        assert all(weighed["demo-auto"] > weighed[c] for c in CANDIDATES), (effort, weighed)
    assert summary["score_for_cost"]["effort"] == 0.5
    # The guide shows this run's plot (tokens and scores of the demo model are the same on every run).
    assert (out / "score-for-cost.svg").read_text() == FIGURE.read_text()
