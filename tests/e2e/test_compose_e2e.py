"""End to end, composing workflows: a served model as another's stage target, prefixed model names (`critic-<model>`,
chains `a&b-<model>`) and per-request settings within the operator's limits. Real `uvicorn adapter_critic.asgi:app`
(recording to a SQLite run store) in front of the scripted upstream running as a server, driven with the official
`openai` SDK.

The servers start once per module; each test resets the upstream's script and recorded calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from ..conftest import RemoteUpstream, run_app, sdk, stop_server
from ..helpers import extension, usage

MESSAGES: list[Any] = [{"role": "user", "content": "Name a prime."}]
KEY = "sk-e2e-compose"


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
default_api_key_env = "UP_KEY"
retries = 0

[models]
technique_prefixes = true
upstream = "base"          # prefixed models are called where `base`'s API model is, with its key
request_limits = {{ n = 2 }}

[prices."*"]               # every model: 1 per million prompt tokens, 2 per million completion tokens
input = 1
output = 2

[served_models.base]
mode = "direct"
api = {{ model = "base-model", base_url = "{up}" }}

[served_models.inner]
mode = "critic"
api = {{ model = "inner-api", base_url = "{up}" }}
critic = {{ model = "inner-critic", base_url = "{up}" }}

[served_models.outer]
mode = "critic"
api = {{ model = "outer-api", base_url = "{up}" }}
critic = {{ served = "inner" }}

[served_models.relayed]
mode = "direct"
api = {{ served = "inner" }}

[served_models.best]
mode = "best_of_n"
api = {{ model = "best-api", base_url = "{up}" }}
judge = {{ model = "judge-model", base_url = "{up}" }}
n = 2
request_limits = {{ n = 3 }}

[served_models.reviewed]
mode = "panel"
api = {{ model = "panel-api", base_url = "{up}" }}
critic = {{ model = "lens-model", base_url = "{up}" }}
coordinator = false
"""


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory, upstream_url: str) -> Iterator[tuple[str, str]]:
    folder: Path = tmp_path_factory.mktemp("compose")
    env = {"UP_KEY": KEY, "XDG_DATA_HOME": str(folder / "data")}
    with run_app(folder / "config.toml", config_toml(upstream_url), **env) as (app_url, _):
        yield upstream_url, app_url


@pytest.fixture
def up(urls: tuple[str, str]) -> RemoteUpstream:
    return RemoteUpstream(urls[0]).reset()


@pytest.fixture
def app_url(urls: tuple[str, str]) -> str:
    return urls[1]


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))


def run_of(app_url: str, run_id: str) -> dict[str, Any]:
    """A run's record, once the store has written it finished (it writes in the background: poll the API, each
    look waiting on the server, never a sleep)."""
    for _ in range(200):
        answer = httpx.get(f"{app_url}/v1/runs/{run_id}")
        if answer.status_code == 200 and answer.json()["status"] != "running":
            found: dict[str, Any] = answer.json()
            return found
        httpx.get(f"{app_url}/v1/health")
    raise AssertionError(f"run {run_id} was never recorded finished")


def script_outer(up: RemoteUpstream) -> None:
    """`outer`: its draft, then `inner`'s whole critic run as its critic stage, then its second pass."""
    up.script(
        {"content": "Nine.", "model": "outer-api", "usage": usage(10, 1)},
        {"content": "9 = 3 x 3.", "model": "inner-api", "usage": usage(20, 2)},
        {"content": "Say why it matters.", "model": "inner-critic", "usage": usage(30, 3)},
        {"content": "Nine is not prime: 9 = 3 x 3.", "model": "inner-api", "usage": usage(40, 4)},
        {"content": "Seven.", "model": "outer-api", "usage": usage(50, 5)},
    )


def test_a_served_model_as_a_stage_runs_its_workflow_nested_and_recorded(
    client: OpenAI, up: RemoteUpstream, app_url: str
) -> None:
    script_outer(up)
    response = client.chat.completions.create(model="outer", messages=MESSAGES)
    ext = extension(response)

    assert response.choices[0].message.content == "Seven."
    calls = up.calls()
    assert [call["body"]["model"] for call in calls] == [
        "outer-api",
        "inner-api",
        "inner-critic",
        "inner-api",
        "outer-api",
    ]
    # The inner run's request is the outer critic stage's messages: the draft to review, never the client's tools.
    assert "Nine." in calls[1]["body"]["messages"][-1]["content"]
    assert "Nine is not prime" in calls[4]["body"]["messages"][-1]["content"]  # the critique reached the second pass
    assert {call["headers"]["authorization"] for call in calls} == {f"Bearer {KEY}"}

    assert ext["intermediate"]["critic"] == "Nine is not prime: 9 = 3 x 3."
    [child] = ext["nested"]["critic"]
    assert (child["served_model"], child["mode"], child["run_id"]) == ("inner", "critic", f"{response.id}.1")
    assert (
        child["intermediate"]["api_draft"] == "9 = 3 x 3." and child["intermediate"]["critic"] == "Say why it matters."
    )
    assert list(child["tokens"]["stages"]) == ["api_draft", "critic", "api_final"]
    # Accounting: the nested stage is the sum of its child's stages, the parent's total the sum of its stages.
    assert child["tokens"]["total"] == usage(90, 9)
    assert ext["tokens"]["stages"]["critic"] == child["tokens"]["total"]
    assert ext["tokens"]["total"] == usage(150, 15)
    assert response.usage is not None and response.usage.total_tokens == 165
    assert ext["targets"]["critic"] == "served:inner"
    # And so is its cost (per million tokens: 1 a prompt token, 2 a completion token).
    assert child["cost"]["total"] == pytest.approx((90 + 2 * 9) / 1e6)
    assert ext["cost"]["stages"]["critic"] == child["cost"]["total"]
    assert ext["cost"]["total"] == pytest.approx((150 + 2 * 15) / 1e6) == sum(ext["cost"]["stages"].values())

    parent = run_of(app_url, response.id)
    child_run = run_of(app_url, child["run_id"])
    listed = httpx.get(f"{app_url}/v1/runs", params={"parent_run_id": response.id}).json()["data"]
    assert [c["id"] for c in parent["children"]] == [child["run_id"]] == [c["id"] for c in listed]
    assert parent["children"][0]["parent_stage"] == "critic" and parent["parent_run_id"] is None
    assert [s["stage"] for s in parent["stages"]] == ["api_draft", "critic", "api_final"]
    assert [s["child_run_id"] for s in parent["stages"]] == [None, child["run_id"], None]
    assert parent["usage"]["total_tokens"] == 165 and parent["cost"]["total"] == ext["cost"]["total"]
    assert parent["stages"][1]["cost"]["amount"] == child_run["cost"]["total"] == child["cost"]["total"]
    assert (child_run["parent_run_id"], child_run["parent_stage"]) == (response.id, "critic")
    assert (child_run["served_model"], child_run["request_id"]) == ("inner", response.id)
    assert [s["stage"] for s in child_run["stages"]] == ["api_draft", "critic", "api_final"]
    assert (
        child_run["usage"]["total_tokens"] == 99 and child_run["answer"]["content"] == "Nine is not prime: 9 = 3 x 3."
    )


def test_a_streaming_client_gets_a_served_api_models_final_call_streamed(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {"content": "Nine.", "model": "inner-api"},
        {"content": "9 = 3 x 3.", "model": "inner-critic"},
        {"content": "Seven, not nine.", "model": "inner-api"},
    )
    text, ext = "", {}
    stream = client.chat.completions.create(
        model="relayed", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.model_extra and "adapter_critic" in chunk.model_extra:
            ext = chunk.model_extra["adapter_critic"]
            assert chunk.usage is not None and chunk.usage.total_tokens == 9
    calls = up.calls()
    assert text == "Seven, not nine."
    assert [call["body"]["model"] for call in calls] == ["inner-api", "inner-critic", "inner-api"]
    assert [call["body"].get("stream", False) for call in calls] == [False, False, True]  # relayed as it came
    [child] = ext["nested"]["api"]
    assert child["served_model"] == "inner" and child["intermediate"]["final"] == "Seven, not nine."
    assert ext["tokens"]["stages"]["api"] == child["tokens"]["total"] == ext["tokens"]["total"]


def test_a_prefixed_model_runs_that_workflow_on_that_model_at_the_upstream(client: OpenAI, up: RemoteUpstream) -> None:
    response = client.chat.completions.create(model="critic-qwen2.5-7b", messages=MESSAGES)
    ext = extension(response)
    calls = up.calls()
    assert response.model == "critic-qwen2.5-7b" and ext["mode"] == "critic"
    assert [call["body"]["model"] for call in calls] == ["qwen2.5-7b"] * 3  # draft, critique, second pass
    assert {call["headers"]["authorization"] for call in calls} == {f"Bearer {KEY}"}  # `base`'s key, at its URL

    up.reset()
    best = client.chat.completions.create(
        model="bon-qwen2.5-7b", messages=MESSAGES, extra_body={"x_adapter_critic": {"n": 2}}
    )
    assert extension(best)["mode"] == "best_of_n"  # `bon`: best_of_n's alias
    models = [call["body"]["model"] for call in up.calls()]
    assert models == ["qwen2.5-7b"] * 4  # two candidates (as asked), judged in both orders
    with pytest.raises(openai.BadRequestError) as refused:  # [models] request_limits = { n = 2 }
        client.chat.completions.create(
            model="bon-qwen2.5-7b", messages=MESSAGES, extra_body={"x_adapter_critic": {"n": 3}}
        )
    assert "request_limits.n = 2" in refused.value.message


def test_a_chain_reviews_the_first_workflows_answer(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {"content": "Nine.", "match": "Name a prime."},
        {"content": "9 = 3 x 3.", "match": "Write your critique"},
        {"content": "Seven.", "match": "takes the critique into account"},
        {"content": "lgtm", "match": "<<<<<<< SEARCH"},
    )
    response = client.chat.completions.create(model="critic&adapter-qwen", messages=MESSAGES)
    ext = extension(response)
    calls = up.calls()
    assert [call["body"]["model"] for call in calls] == ["qwen"] * 4
    # The adapter, the second workflow, was shown the first one's answer as its draft.
    assert "<draft_reply>\nSeven.\n</draft_reply>" in calls[3]["body"]["messages"][-1]["content"]
    assert response.choices[0].message.content == "Seven."
    assert ext["mode"] == "adapter" and ext["intermediate"]["api_draft"] == "Seven."
    [first] = ext["nested"]["api"]  # the adapter's first API call was the critic run
    assert (first["mode"], first["served_model"]) == ("critic", "critic-qwen")
    assert ext["tokens"]["total"]["total_tokens"] == 4 * 3


def test_models_answers_for_composed_ids_without_listing_them(client: OpenAI) -> None:
    assert client.models.retrieve("critic-qwen").id == "critic-qwen"
    assert client.models.retrieve("best_of_n&panel-qwen").id == "best_of_n&panel-qwen"
    listed = [model.id for model in client.models.list()]
    assert listed == ["base", "inner", "outer", "relayed", "best", "reviewed"]
    with pytest.raises(openai.NotFoundError) as unchainable:
        client.models.retrieve("critic&advisor-qwen")
    assert "'advisor' reviews no draft" in unchainable.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4.1")  # not a workflow's prefix: just a model this server does not serve
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4.1", messages=MESSAGES)


def test_per_request_settings_are_accepted_within_the_limits(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(*[{"content": "Score: 7", "model": "judge-model"}] * 3)
    three = client.chat.completions.create(
        model="best", messages=MESSAGES, extra_body={"x_adapter_critic": {"n": 3, "judging": "pointwise"}}
    )
    assert len(extension(three)["intermediate"]["candidates"]) == 3
    assert sum(call["body"]["model"] == "judge-model" for call in up.calls()) == 3  # a score each

    up.reset()
    lenses = [{"name": "facts", "system_prompt": "Check only the facts."}]
    panel = client.chat.completions.create(
        model="reviewed", messages=MESSAGES, extra_body={"x_adapter_critic": {"lenses": lenses}}
    )
    assert set(extension(panel)["intermediate"]["lenses"]) == {"facts"}
    lens_calls = [call for call in up.calls() if call["body"]["model"] == "lens-model"]
    assert [call["body"]["messages"][0]["content"] for call in lens_calls] == ["Check only the facts."]


@pytest.mark.parametrize(
    ("model", "overrides", "param", "words"),
    [
        ("best", {"n": 4}, "x_adapter_critic.n", "request_limits.n = 3"),
        ("best", {"n": 9}, "x_adapter_critic.n", "<= 8"),
        ("best", {"judging": "vibes"}, "x_adapter_critic.judging", "pairwise"),
        ("best", {"bogus": 1}, "x_adapter_critic.bogus", "Known override fields"),
        (
            "reviewed",
            {"lenses": [{"name": "x", "system_prompt": "y", "target": {"model": "m", "base_url": "http://evil/v1"}}]},
            "x_adapter_critic.lenses[0].target",
            "unknown field",
        ),
    ],
)
def test_per_request_settings_are_refused_naming_the_setting(
    client: OpenAI, up: RemoteUpstream, model: str, overrides: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body={"x_adapter_critic": overrides})
    assert refused.value.body is not None and refused.value.body["param"] == param  # type: ignore[index]
    assert words in refused.value.message
    assert up.calls() == []  # refused before any stage ran


CYCLE = """
[served_models.a]
mode = "critic"
api = { model = "m", base_url = "http://127.0.0.1:9/v1" }
critic = { served = "b" }

[served_models.b]
mode = "direct"
api = { served = "a" }
"""
# m0's API model is m1's run, whose API model is m2's… m5's: five served models below m0, one more than allowed.
TOO_DEEP = "".join(f'[served_models.m{i}]\nmode = "direct"\napi = {{ served = "m{i + 1}" }}\n' for i in range(5)) + (
    '[served_models.m5]\nmode = "direct"\napi = { model = "m", base_url = "http://127.0.0.1:9/v1" }\n'
)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (CYCLE, "served_models.b.api: served model a → critic → b → api → a is a cycle"),
        (TOO_DEEP, "served_models.m0: served model m0 → api → m1 → api → m2 → api → m3 → api → m4 → api → m5 nests "
         "5 served models deep; at most 4 are allowed"),
    ],
    ids=["cycle", "too-deep"],
)  # fmt: skip
def test_a_cycle_or_a_nesting_too_deep_refuses_to_start(tmp_path: Path, config: str, words: str) -> None:
    path = tmp_path / "config.toml"
    with run_app(path, config) as (_, proc):
        returncode = proc.wait(timeout=10)
        stderr = stop_server(proc)
    assert returncode != 0
    message = [line for line in stderr.splitlines() if line.strip()][-1]
    assert f"{path}: {words}" in message
    assert "Traceback" not in stderr


def test_a_chain_too_long_is_not_served(client: OpenAI, up: RemoteUpstream) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="critic&critic&critic&critic&critic&critic-qwen", messages=MESSAGES)
    assert "a chain of at most 5 workflows is served, not 6" in refused.value.message
    assert up.calls() == []
    five = client.chat.completions.create(model="critic&critic&critic&critic&critic-qwen", messages=MESSAGES)
    ext = extension(five)
    for _ in range(4):  # each critic's draft was the run of the chain before it, four levels deep
        [ext] = ext["nested"]["api_draft"]
    assert ext["served_model"] == "critic-qwen" and "nested" not in ext
    assert len(up.calls()) == 3 + 4 * 2  # the innermost drafts; each critic after it critiques and revises


def test_every_workflow_composes_and_takes_its_settings_from_a_request(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(*[{"content": "So the answer is 18.", "model": "qwen"}] * 2)
    chained = client.chat.completions.create(
        model="self_consistency&self_refine-qwen",
        messages=MESSAGES,
        extra_body={"x_adapter_critic": {"max_rounds": 1}},  # the request's settings are self_refine's, the outer
    )
    ext = extension(chained)
    [voted] = ext["nested"]["api_draft"]  # self_refine's draft was self-consistency's vote
    assert (voted["mode"], voted["intermediate"]["final"]) == ("self_consistency", "So the answer is 18.")
    assert list(ext["tokens"]["stages"]) == ["api_draft", "feedback:1", "refine:1"]  # one round, as asked
    assert ext["tokens"]["stages"]["api_draft"] == voted["tokens"]["total"]
    assert len(up.calls()) == 5 + 2  # five samples (self_consistency's default), then one feedback and one refine

    up.reset()
    reread = client.chat.completions.create(
        model="re2-qwen", messages=MESSAGES, extra_body={"x_adapter_critic": {"reread_lead": "Once more: "}}
    )
    assert extension(reread)["intermediate"]["reread"] == "Once more: Name a prime."
    with pytest.raises(openai.BadRequestError) as refused:  # [models] request_limits = { n = 2 }
        client.chat.completions.create(
            model="self_consistency-qwen", messages=MESSAGES, extra_body={"x_adapter_critic": {"n": 3}}
        )
    assert "request_limits.n = 2" in refused.value.message


def test_a_mixture_of_agents_answer_is_verified_by_chain_of_verification(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {"content": "Seven.", "match": "<responses_from_models>"},  # the aggregator, shown the proposers' answers
        {"content": "1. Is 7 a prime number?", "match": "verification questions about the draft"},
        {"content": "Yes.", "match": "Is 7 a prime number?"},
        {"content": "Seven, checked.", "match": "To check your previous reply"},
    )
    response = client.chat.completions.create(
        model="moa&cove-qwen", messages=MESSAGES, extra_body={"x_adapter_critic": {"max_questions": 1}}
    )
    ext = extension(response)
    [mixture] = ext["nested"]["baseline"]  # chain-of-verification's baseline was the mixture's answer
    assert (ext["mode"], mixture["mode"], mixture["intermediate"]["final"]) == (
        "chain_of_verification",
        "mixture_of_agents",
        "Seven.",
    )
    assert ext["intermediate"]["questions"] == ["Is 7 a prime number?"]
    assert response.choices[0].message.content == "Seven, checked."
    assert len(up.calls()) == 3 + 1 + 3  # three proposers and the aggregator; the plan, one question, the final

    up.reset()
    two = [[{"options": {"temperature": 0.1}}, {"options": {"temperature": 0.9}}]]
    chosen = client.chat.completions.create(
        model="moa-qwen", messages=MESSAGES, extra_body={"x_adapter_critic": {"layers": two}}
    )
    proposers = [call for call in up.calls() if call["body"]["messages"] == MESSAGES]
    assert sorted(call["body"]["temperature"] for call in proposers) == [0.1, 0.9]  # the request's layer of two
    assert set(extension(chosen)["tokens"]["stages"]) == {"proposer:1.1", "proposer:1.2", "aggregator"}
    elsewhere = [[{"target": {"model": "m", "base_url": "http://elsewhere.test/v1"}}]]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="moa-qwen", messages=MESSAGES, extra_body={"x_adapter_critic": {"layers": elsewhere}}
        )
    assert refused.value.body is not None
    assert refused.value.body["param"] == "x_adapter_critic.layers[0][0].target"  # type: ignore[index]
