"""The mixture_of_agents workflow: layers of proposers at once, each later layer and the aggregator shown the layer
before in the aggregate-and-synthesize prompt; the default layer; failed proposers and layers; the aggregator's
failure and its live stream; proposer targets in the config; the run store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter_critic import ConfigError
from adapter_critic.workflows.synthesis import DEFAULT_SYNTHESIS_PROMPT, RESPONSES_OPEN

from ..conftest import OTHER_URL, AppFactory, chat, make_config
from ..helpers import post, target, usage_totalling
from ..scripted_upstream import Reply, ScriptedUpstream
from ..store.runs import recording

pytestmark = pytest.mark.anyio

API = target("api-model")
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
LAYERS = [
    [
        {"target": target("alpha-model"), "options": {"temperature": 0.2}},
        {"target": target("beta-model")},
        {"options": {"temperature": 0.9}},
    ],
    [{"target": target("alpha-model")}, {"options": {"temperature": 0.3}}],
]


def moa(**served: Any) -> Any:
    aggregator = target("aggregator-model")
    return make_config(
        served_models={"m": {"mode": "mixture_of_agents", "api": API, "aggregator": aggregator, **served}}
    )


def layer(group: str, *answers: tuple[str, str], later: bool = False) -> list[Reply]:
    """A reply per proposer (model, text), all held until every one arrived: they overlap in time. A later layer's
    replies answer only calls shown earlier responses."""
    match = RESPONSES_OPEN if later else None
    return [Reply(text, model=model, match=match, gather=len(answers), group=group) for model, text in answers]


FIRST = (("alpha-model", "Nine is prime."), ("beta-model", "Seven."), ("api-model", "Seven is prime."))
SECOND = (("alpha-model", "Seven: nine is 3 x 3."), ("api-model", "Seven, a prime."))


def system_of(call: Any) -> str:
    content: str = call.messages[0]["content"]
    return content


async def test_each_layer_answers_at_once_and_the_next_sees_its_answers(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        *layer("first", *FIRST),
        *layer("second", *SECOND, later=True),
        Reply("Seven.", model="aggregator-model", usage=usage_totalling(9)),
    )
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime.", "name": "u"}]
    body = {"model": "m", "messages": asked, "temperature": 0.1, "tools": [TOOL]}
    async with serve(moa(layers=LAYERS)) as client:
        data = await post(client, body)
    calls = upstream.calls
    first, second, [aggregator] = calls[:3], calls[3:5], calls[5:]
    assert sorted(c.model for c in first) == ["alpha-model", "api-model", "beta-model"]
    # The first layer answers the conversation as sent, with the request's options and each proposer's own.
    assert all(c.messages == asked and c.body["tools"] == [TOOL] for c in first)
    assert {c.model: c.body["temperature"] for c in first} == {"alpha-model": 0.2, "beta-model": 0.1, "api-model": 0.9}
    # The second layer and the aggregator: the client's system prompt, then the synthesis prompt and the answers.
    for call in (*second, aggregator):
        assert system_of(call).startswith("Be brief.\n\n" + DEFAULT_SYNTHESIS_PROMPT)
        assert call.messages[1:] == asked[1:] and call.body["tools"] == [TOOL]
    for call in second:
        assert all(
            f"<response_{i}>\n{text}\n</response_{i}>" in system_of(call) for i, (_, text) in enumerate(FIRST, 1)
        )
    assert {c.model: c.body["temperature"] for c in second} == {"alpha-model": 0.1, "api-model": 0.3}
    # The aggregator sees the last layer's answers only.
    assert "<response_2>\nSeven, a prime.\n</response_2>" in system_of(aggregator)
    assert "Nine is prime." not in system_of(aggregator) and "<response_3>" not in system_of(aggregator)
    assert aggregator.body["temperature"] == 0.1
    ext = data["adapter_critic"]
    assert ext["intermediate"] == {
        "layers": [[text for _, text in FIRST], [text for _, text in SECOND]],
        "final": "Seven.",
    }
    assert list(ext["tokens"]["stages"])[-1] == "aggregator"
    assert set(ext["tokens"]["stages"]) == {
        "proposer:1.1",
        "proposer:1.2",
        "proposer:1.3",
        "proposer:2.1",
        "proposer:2.2",
        "aggregator",
    }
    assert ext["targets"]["proposer:1.2"].startswith("beta-model@") and ext["targets"]["proposer:2.2"].startswith(
        "api-model@"
    )
    assert set(ext["timings_ms"]) == {*ext["tokens"]["stages"], "total"}
    assert data["usage"]["total_tokens"] == 5 * 3 + 9 == ext["tokens"]["total"]["total_tokens"]
    assert data["choices"][0]["message"]["content"] == "Seven." and "degraded" not in ext


async def test_by_default_three_proposers_on_the_api_target_at_spread_temperatures(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(*layer("default", ("api-model", "A."), ("api-model", "B."), ("api-model", "C.")))
    config = make_config(served_models={"m": {"mode": "mixture_of_agents", "api": API}})
    async with serve(config) as client:
        data = await post(client, chat("m"))
    proposers, aggregator = upstream.calls[:3], upstream.calls[3]
    assert sorted(c.body["temperature"] for c in proposers) == [0.5, 0.7, 0.9]
    assert aggregator.model == "api-model" and "temperature" not in aggregator.body  # no aggregator: the API target
    assert all(f"<response_{i}>" in system_of(aggregator) for i in (1, 2, 3))
    assert len(data["adapter_critic"]["intermediate"]["layers"][0]) == 3


async def test_a_failed_proposer_is_left_out(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(status=500, body='{"error": {"message": "alpha is down"}}', model="alpha-model"),
        Reply("Seven.", model="beta-model"),
        Reply("Seven is prime.", model="api-model"),
    )
    async with serve(moa(layers=LAYERS[:1])) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert ext["intermediate"]["layers"] == [[None, "Seven.", "Seven is prime."]]
    assert list(ext["intermediate"]["proposer_errors"]) == ["proposer:1.1"]
    aggregated = system_of(upstream.calls[-1])
    assert "<response_1>\nSeven.\n</response_1>" in aggregated and "<response_3>" not in aggregated


async def test_a_later_layer_that_fails_whole_is_passed_over(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    failing = [Reply(status=503, body="{}", model=m, match=RESPONSES_OPEN) for m in ("alpha-model", "api-model")]
    upstream.script(*layer("first", *FIRST), *failing, Reply("Seven.", model="aggregator-model"))
    async with serve(moa(layers=LAYERS)) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True and ext["intermediate"]["layers"][1] == [None, None]
    assert set(ext["intermediate"]["proposer_errors"]) == {"proposer:2.1", "proposer:2.2"}
    aggregated = system_of(upstream.calls[-1])  # the aggregator got the first layer's answers
    assert all(text in aggregated for _, text in FIRST)
    assert data["choices"][0]["message"]["content"] == "Seven."


async def test_the_first_layer_failing_whole_is_the_requests_failure(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    bad = '{"error": {"message": "bad tools", "type": "invalid_request_error", "param": "tools", "code": null}}'
    upstream.script(*(Reply(status=400, body=bad) for _ in range(3)))
    async with serve(moa(layers=LAYERS)) as client:
        data = await post(client, chat("m", tools=[TOOL]), status=400)
    assert data["error"]["message"] == "bad tools"  # the client's own 4xx, as the upstream said it
    assert len(upstream.calls) == 3  # no second layer, no aggregator


async def test_a_failed_aggregator_leaves_the_first_answer_of_the_last_layer(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        *layer("first", *FIRST),
        *layer("second", *SECOND, later=True),
        Reply(status=500, body="{}", model="aggregator-model"),
    )
    async with serve(moa(layers=LAYERS)) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True and "aggregator" in ext["intermediate"]["aggregator_error"]
    assert data["choices"][0]["message"]["content"] == "Seven: nine is 3 x 3." == ext["intermediate"]["final"]


async def test_the_aggregator_streams_live(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*layer("first", *FIRST), Reply("Seven, streamed.", model="aggregator-model"))
    async with serve(moa(layers=LAYERS[:1])) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Seven, streamed."
    assert [c.body.get("stream", False) for c in upstream.calls] == [False, False, False, True]
    assert chunks[-1]["adapter_critic"]["intermediate"]["final"] == "Seven, streamed."


async def test_a_proposers_own_target_gets_its_own_key_only(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-main")
    other = {"model": "other-model", "base_url": OTHER_URL, "api_key_env": "OTHER_KEY"}
    async with serve(moa(layers=[[{"target": other}, {}]])) as client:
        await post(client, chat("m"))
    keys = {call.model: call.headers.get("authorization") for call in upstream.calls}
    assert keys == {
        "other-model": "Bearer sk-other",
        "api-model": "Bearer sk-main",
        "aggregator-model": "Bearer sk-main",
    }
    assert {call.host for call in upstream.calls if call.model == "other-model"} == {"other.test"}


@pytest.mark.parametrize(
    ("layers", "problem"),
    [
        ([], r"layers: Expected `array` of length >= 1"),
        ([[]], r"layers\[0\]: Expected `array` of length >= 1"),
        ([[{}]] * 5, r"layers: Expected `array` of length <= 4"),
        ([[{}] * 17], r"layers\[0\]: Expected `array` of length <= 16"),
        ([[{"temperature": 0.2}]], r"layers\[0\]\[0\]\.temperature: unknown key"),
        ([[{}, {"target": {"model": "x"}}]], r"layers\[0\]\[1\]\.target\.base_url: required key is missing"),
    ],
)
def test_layers_are_checked_at_load(layers: Any, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        moa(layers=layers)


async def test_the_run_store_records_every_stage(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(*layer("first", *FIRST), Reply("Seven.", model="aggregator-model"))
    aggregator = target("aggregator-model")
    served = {"m": {"mode": "mixture_of_agents", "api": API, "aggregator": aggregator, "layers": LAYERS[:1]}}
    async with recording(upstream, f"sqlite:///{tmp_path / 'runs.sqlite3'}", top={"served_models": served}) as (
        client,
        store,
    ):
        run_id = (await post(client, chat("m")))["id"]
        await store.flush()
        detail = (await client.get(f"/runs/{run_id}")).json()
    assert detail["mode"] == "mixture_of_agents"
    assert [s["stage"] for s in detail["stages"]][-1] == "aggregator"
    assert sorted(s["stage"] for s in detail["stages"]) == [
        "aggregator",
        "proposer:1.1",
        "proposer:1.2",
        "proposer:1.3",
    ]
    assert detail["intermediate"]["layers"] == [[text for _, text in FIRST]]
