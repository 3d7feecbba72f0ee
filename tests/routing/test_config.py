"""An auto model's and a shadow's config: every mistake refused at load with one line that names its key."""

from __future__ import annotations

from typing import Any

import pytest

from adapter_critic import ConfigError
from adapter_critic.config import Config

API = {"model": "m", "base_url": "http://127.0.0.1:9/v1"}


def load(**served: Any) -> Config:
    return Config.from_dict({"served_models": {"m": {"mode": "direct", "api": API}, **served}})


@pytest.mark.parametrize(
    ("served", "said"),
    [
        ({"a": {"mode": "auto", "candidates": []}}, "served_models.a"),
        ({"a": {"mode": "auto", "candidates": ["m", "m"]}}, "a candidate is listed twice"),
        ({"a": {"mode": "auto", "candidates": ["m"], "rules": [{"use": "x"}]}}, "'x' is not one of the candidates"),
        ({"a": {"mode": "auto", "candidates": ["m"], "api": API}}, "served_models.a.api: not a key of an auto model"),
        ({"a": {"mode": "auto", "candidates": ["nowhere"]}}, "'nowhere' is not a served model"),
        ({"a": {"mode": "auto", "candidates": ["m", "a"]}}, "is a cycle"),
        ({"a": {"mode": "auto", "candidates": ["m"], "effort": 2}}, "effort"),
        ({"a": {"mode": "auto", "candidates": ["m"], "classes": [{"name": "c", "pattern": "("}]}}, "not a regular"),
        ({"a": {"mode": "auto", "candidates": ["m"], "classes": [{"name": "c", "features": ["x"]}]}}, "feature 'x'"),
        ({"s": {"mode": "direct", "api": API, "shadow": {"candidate": "x", "judge": "m"}}},
         "served_models.s.shadow.candidate: 'x' is not a served model"),
        ({"s": {"mode": "direct", "api": API, "shadow": {"candidate": "m", "judge": "m", "budget_cost": 1.0}}},
         "shadow.budget_cost: a cost budget needs [prices]"),
        ({"s": {"mode": "direct", "api": API, "shadow": {"candidate": "f", "judge": "m"}},
          "f": {"mode": "direct", "api": {**API, "forward_client_authorization": True}}},
         "served_models.s.shadow.candidate: 'f' forwards the caller's key upstream"),
        ({"s": {"mode": "direct", "api": API, "shadow": {"candidate": "m", "judge": "r"}},
          "r": {"mode": "critic", "api": {"served": "f"}},
          "f": {"mode": "direct", "api": {**API, "forward_client_authorization": True}}},
         "served_models.s.shadow.judge: 'r' forwards the caller's key"),
    ],
)  # fmt: skip
def test_a_mistake_is_refused_naming_its_key(served: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(**served)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_an_auto_model_is_a_direct_run_of_its_first_candidate_until_routed() -> None:
    config = load(a={"mode": "auto", "candidates": ["m"], "shadow": {"candidate": "m", "judge": "m"}})
    auto = config.served_models["a"]
    assert (auto.kind, auto.mode, auto.served, auto.route is not None) == ("auto", "direct", {"api": "m"}, True)
    assert auto.shadow is not None and auto.shadow.share == 0.1 and auto.shadow.concurrency == 2
