"""Composing workflows in the config: served models as stage targets (references, cycles, depth), `draft` stages,
`[models]` (prefixed model names and their upstream) and a served model's `request_limits` — each mistake refused
when the config loads, naming the key path (and, for a cycle or a nesting too deep, the served models on its
path)."""

from __future__ import annotations

from typing import Any

import pytest

from adapter_critic import Config, ConfigError
from adapter_critic.config.models import MAX_NESTING, composed
from adapter_critic.config.served import ServedModel

from ..conftest import UPSTREAM_URL
from ..helpers import target

M = target("m")  # a plain stage target


def load(served: dict[str, Any], **top: Any) -> Config:
    return Config.from_dict({"served_models": served, **top}, source="inline")


def refused(served: dict[str, Any], **top: Any) -> str:
    with pytest.raises(ConfigError) as error:
        load(served, **top)
    return str(error.value)


def test_a_stage_target_may_be_another_served_model() -> None:
    config = load(
        {
            "inner": {"mode": "critic", "api": M},
            "outer": {"mode": "panel", "api": {"served": "inner"}, "critic": {"served": "inner"},
                      "lenses": [{"name": "x", "system_prompt": "Check.", "target": {"served": "inner"}}]},
        }
    )  # fmt: skip
    outer = config.served_models["outer"]
    assert outer.api is None and outer.served == {"api": "inner", "critic": "inner", "lens:x": "inner"}
    assert outer.stage_targets()[0] == ("api", "inner")
    assert [where for where, _ in config.key_paths()] == ["served_models.inner.api"]  # no upstream of its own


@pytest.mark.parametrize(
    ("served", "words"),
    [
        ({"a": {"mode": "critic", "api": M, "critic": {"served": "a"}}}, "served model a → critic → a is a cycle"),
        (
            {
                "a": {"mode": "critic", "api": M, "critic": {"served": "b"}},
                "b": {"mode": "adapter", "api": M, "adapter": {"served": "c"}},
                "c": {"mode": "direct", "api": {"served": "a"}},
            },
            "served_models.c.api: served model a → critic → b → adapter → c → api → a is a cycle",
        ),
    ],
)
def test_a_cycle_is_refused_with_its_path(served: dict[str, Any], words: str) -> None:
    message = refused(served)
    assert message.startswith("inline: served_models.")
    assert words in message


def chain(length: int) -> dict[str, Any]:
    """`m0` whose API model is `m1`'s run, whose API model is `m2`'s… down to `m<length>`, a plain model."""
    served = {f"m{i}": {"mode": "direct", "api": {"served": f"m{i + 1}"}} for i in range(length)}
    served[f"m{length}"] = {"mode": "direct", "api": M}
    return served


def test_nesting_is_bounded() -> None:
    load(chain(MAX_NESTING))  # m0 → … → m4: four levels below m0
    message = refused(chain(MAX_NESTING + 1))
    assert message == (
        "inline: served_models.m0: served model m0 → api → m1 → api → m2 → api → m3 → api → m4 → api → m5 nests 5 "
        f"served models deep; at most {MAX_NESTING} are allowed"
    )


@pytest.mark.parametrize(
    ("served", "path", "words"),
    [
        ({"a": {"mode": "critic", "api": M, "critic": {"served": "nobody"}}}, "served_models.a.critic",
         "'nobody' is not a served model"),
        ({"a": {"mode": "critic", "api": M, "critic": {"served": "b", "model": "x"}}},
         "served_models.a.critic.model", "unknown key"),
        ({"a": {"mode": "critic", "api": M, "draft": M}}, "served_models.a.draft", "another served model"),
        ({"a": {"mode": "direct", "api": M}, "b": {"mode": "advisor", "api": M, "draft": {"served": "a"}}},
         "served_models.b", "reviews a draft"),
        ({"a": {"mode": "best_of_n", "api": M, "request_limits": {"temperature_of_the_sun": 3}}}, "served_models.a",
         "request_limits.temperature_of_the_sun: not a setting a request may choose"),
        ({"a": {"mode": "best_of_n", "api": M, "request_limits": {"n": -1}}}, "served_models.a.request_limits", ">= 0"),
        ({"a": {"mode": "critic"}}, "served_models.a.api", "required key is missing"),
    ],
)  # fmt: skip
def test_a_wrong_reference_or_limit_names_its_key_path(served: dict[str, Any], path: str, words: str) -> None:
    message = refused(served)
    assert message.startswith(f"inline: {path}")
    assert words in message


def test_a_draft_stage_and_request_limits_are_accepted_where_they_apply() -> None:
    config = load(
        {
            "best": {"mode": "best_of_n", "api": M, "request_limits": {"n": 4, "lenses": 2, "max_adapter_retries": 1}},
            "reviewed": {"mode": "critic", "api": M, "draft": {"served": "best"}},
        }
    )
    assert config.served_models["best"].request_limits == {"n": 4, "lenses": 2, "max_adapter_retries": 1}
    assert config.served_models["reviewed"].served == {"draft": "best"}


PREFIXED = {"technique_prefixes": True}


def test_prefixed_models_need_an_upstream() -> None:
    served = {"base": {"mode": "direct", "api": M}}
    assert "models.technique_prefixes: prefixed models need an upstream" in refused(served, models=PREFIXED)
    assert "models.upstream: 'nobody' must name a served model" in refused(
        served, models={**PREFIXED, "upstream": "nobody"}
    )
    load(served, models={**PREFIXED, "upstream": "base"})
    load(served, models=PREFIXED, passthrough=target("unused"))


def test_a_prefixed_model_may_be_a_stage_target_too() -> None:
    served = {
        "base": {"mode": "direct", "api": target("base-model")},
        "outer": {"mode": "critic", "api": M, "critic": {"served": "nothing&critic-qwen"}},
    }
    assert "'nothing&critic-qwen' is not a served model" in refused(served, models={**PREFIXED, "upstream": "base"})
    served["outer"]["critic"] = {"served": "best_of_n&critic-qwen"}
    load(served, models={**PREFIXED, "upstream": "base"})


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("critic-qwen2.5-7b", ("critic", "qwen2.5-7b", {})),
        ("bon-llama-3-8b", ("best_of_n", "llama-3-8b", {})),
        ("best_of_n&critic-q", ("critic", "q", {"draft": "best_of_n-q"})),
        ("direct&adapter&critic-q", ("critic", "q", {"draft": "direct&adapter-q"})),
        ("gpt-4.1", None),  # a model of the upstream's own
        ("critic-", None),
        ("-critic", None),
        ("critic", None),
        ("critic&nothing-q", None),
    ],
)
def test_a_composed_id_is_read_from_its_prefix(model_id: str, expected: tuple[str, str, dict[str, str]] | None) -> None:
    config = load({"base": {"mode": "direct", "api": target("base-model")}}, models={**PREFIXED, "upstream": "base"})
    made = composed(config, model_id)
    if expected is None:
        assert made is None and config.served(model_id) is None
        return
    assert isinstance(made, ServedModel) and made.api is not None
    assert (made.mode, made.api.model, made.served) == expected
    assert made.api.base_url == UPSTREAM_URL
    assert config.serves(model_id)


def test_a_composed_id_that_cannot_be_served_says_why() -> None:
    config = load({"base": {"mode": "direct", "api": M}}, models={**PREFIXED, "upstream": "base"})
    assert composed(config, "critic&advisor-q") == (
        "'advisor' reviews no draft, so it cannot follow `&` in a chain "
        "(these can: adapter, critic, panel, self_refine, chain_of_verification)"
    )
    too_long = "&".join(["critic"] * (MAX_NESTING + 2)) + "-q"
    assert composed(config, too_long) == f"a chain of at most {MAX_NESTING + 1} workflows is served, not 6"
    assert not config.serves("critic&advisor-q")
    unprefixed = load({"base": {"mode": "direct", "api": M}})
    assert composed(unprefixed, "critic-q") is None and not unprefixed.serves("critic-q")
