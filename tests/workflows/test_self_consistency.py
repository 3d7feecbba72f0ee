"""The self_consistency workflow: samples at once, the majority answer with its reasoning, universal
self-consistency when no answer can be extracted, failed samples left out, `n` in one call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter_critic import ConfigError
from adapter_critic.workflows.self_consistency import DEFAULT_CONSISTENCY_SYSTEM_PROMPT

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import post
from ..scripted_upstream import Reply, ScriptedUpstream
from ..store.runs import recording

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL, "options": {"max_tokens": 50}}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def consistent(**settings: Any) -> Any:
    return make_config(served_models={"m": {"mode": "self_consistency", "api": API, **settings}})


def samples(*texts: str | None) -> list[Reply]:
    """A reply per sample, all held until every one arrived (proof that they overlap in time); None: a 500."""
    return [
        Reply(text, model="api-model", gather=len(texts), group="samples")
        if text is not None
        else Reply(status=500, body='{"error": {"message": "overloaded"}}', model="api-model")
        for text in texts
    ]


def picked(text: str) -> Reply:
    """The consistency judge's reply (its call is the only one with a system prompt)."""
    return Reply(text, model="api-model", match="most consistent")


async def test_the_majority_answer_is_returned_with_its_reasoning(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        *samples(
            "17 * 23 is about 400, so 400.",
            "17 * 20 = 340 and 17 * 3 = 51: 391.",
            "It is 391.0",
            "Roughly 1,000",
            "23 * 17 = 391",
        )
    )
    async with serve(consistent(seed=3)) as client:
        data = await post(client, chat("m", "What is 17 * 23?", tools=[TOOL], temperature=0.1))
    calls = upstream.calls
    assert len(calls) == 5 and upstream.max_in_flight == 5  # every sample at once, and nothing more
    assert all(call.body["temperature"] == 0.7 for call in calls)  # the setting's, over the request's own
    assert sorted(call.body["seed"] for call in calls) == [3, 4, 5, 6, 7]
    assert all(call.body["tools"] == [TOOL] and call.body["max_tokens"] == 50 for call in calls)
    assert all(call.messages == [{"role": "user", "content": "What is 17 * 23?"}] for call in calls)
    assert all("n" not in call.body for call in calls)
    ext = data["adapter_critic"]
    intermediate = ext["intermediate"]
    assert intermediate["answers"] == ["400", "391", "391", "1000", "391"]
    assert intermediate["votes"] == {"400": 1, "391": 3, "1000": 1}
    assert intermediate["chosen"] == 1 and intermediate["chosen_by"] == "majority"
    # The first sample that gave the majority answer, its whole reasoning.
    assert data["choices"][0]["message"]["content"] == "17 * 20 = 340 and 17 * 3 = 51: 391." == intermediate["final"]
    assert list(ext["tokens"]["stages"]) == [f"sample:{i}" for i in range(1, 6)]
    assert data["usage"]["total_tokens"] == 5 * 3 and "degraded" not in ext


async def test_a_tie_goes_to_the_answer_given_first(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*samples("Answer: B", "It must be (C)", "answer is C", "B"))
    async with serve(consistent(n=4, extract="choice")) as client:
        data = await post(client, chat("m"))
    intermediate = data["adapter_critic"]["intermediate"]
    assert intermediate["votes"] == {"B": 2, "C": 2}
    assert intermediate["chosen"] == 0 and intermediate["chosen_by"] == "tie"
    assert data["choices"][0]["message"]["content"] == "Answer: B"


async def test_without_answers_the_api_model_picks_the_most_consistent(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        *samples("Paris is the capital.", "Lyon, I think.", "The capital is Paris."),
        picked("**The most consistent response is Response 3**: two of three say Paris."),
    )
    async with serve(consistent(n=3)) as client:
        data = await post(client, chat("m", "Capital of France?", tools=[TOOL]))
    judge = upstream.calls[-1]
    assert len(upstream.calls) == 4
    assert judge.messages[0] == {"role": "system", "content": DEFAULT_CONSISTENCY_SYSTEM_PROMPT}
    shown = judge.messages[1]["content"]
    assert "[user]\nCapital of France?" in shown
    assert shown.index("Response 1:\nParis is") < shown.index("Response 2:\nLyon") < shown.index("Response 3:\nThe")
    assert "tools" not in judge.body and "temperature" not in judge.body  # a reviewer call: its target's options only
    intermediate = data["adapter_critic"]["intermediate"]
    assert intermediate["answers"] == [None, None, None] and intermediate["votes"] == {}
    assert intermediate["consistency"].startswith("**The most consistent")
    assert intermediate["chosen"] == 2 and intermediate["chosen_by"] == "universal"
    assert data["choices"][0]["message"]["content"] == "The capital is Paris."
    assert list(data["adapter_critic"]["tokens"]["stages"])[-1] == "consistency"


@pytest.mark.parametrize("reply", [Reply("They all differ.", match="most consistent"), None])
async def test_an_unreadable_or_failed_pick_leaves_the_first_sample(
    serve: AppFactory, upstream: ScriptedUpstream, reply: Reply | None
) -> None:
    failed = Reply(status=500, body='{"error": {"message": "judge down"}}', match="most consistent")
    upstream.script(*samples("alpha", "beta"), reply or failed)
    async with serve(consistent(n=2)) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["intermediate"]["chosen"] == 0 and ext["intermediate"]["chosen_by"] == "first"
    assert data["choices"][0]["message"]["content"] == "alpha"
    assert ext.get("degraded", False) is (reply is None)
    assert ("judge down" in ext["intermediate"].get("consistency_error", "")) is (reply is None)


async def test_a_failed_sample_is_left_out_and_noted(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("It is 4.", model="api-model", match="2 + 2"),
        Reply(status=500, body='{"error": {"message": "overloaded"}}', model="api-model"),
        Reply("So 5.", model="api-model"),
    )
    async with serve(consistent(n=3)) as client:
        data = await post(client, chat("m", "What is 2 + 2?"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    [failed] = ext["intermediate"]["sample_errors"]
    index = int(failed.split(":")[1]) - 1
    assert ext["intermediate"]["samples"][index] is None and ext["intermediate"]["answers"][index] is None
    assert sum(ext["intermediate"]["votes"].values()) == 2
    assert failed in ext["tokens"]["stages"]


async def test_every_sample_failing_is_the_requests_failure(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    bad = '{"error": {"message": "bad tools", "type": "invalid_request_error", "param": "tools", "code": null}}'
    upstream.script(*(Reply(status=400, body=bad, model="api-model") for _ in range(3)))
    async with serve(consistent(n=3)) as client:
        data = await post(client, chat("m"), status=400)
    assert data["error"]["message"] == "bad tools"
    assert len(upstream.calls) == 3  # no consistency call after that


async def test_sampling_n_asks_for_every_sample_in_one_call(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": None}
        for i, text in enumerate(["= 12", "so 13", "13 it is"])
    ]
    usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "api-model", "choices": choices}
    upstream.script(Reply(body=json.dumps({**body, "usage": usage}), model="api-model"))
    async with serve(consistent(n=3, sampling="n", temperature=1.1)) as client:
        data = await post(client, chat("m", "What is 6 + 7?"))
    [call] = upstream.calls
    assert call.body["n"] == 3 and call.body["temperature"] == 1.1
    ext = data["adapter_critic"]
    assert ext["intermediate"]["samples"] == ["= 12", "so 13", "13 it is"]
    assert ext["intermediate"]["chosen"] == 1
    assert data["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "so 13"}, "finish_reason": "stop"}
    ]
    assert list(ext["tokens"]["stages"]) == ["samples"] and data["usage"]["total_tokens"] == 21


async def test_the_majority_answer_streams_as_chunks(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(*samples("x = 2", "x = 3", "so x is 3"))
    async with serve(consistent(n=3)) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "x = 3"
    assert all("stream" not in call.body for call in upstream.calls)  # samples are plain calls, voted on first
    assert chunks[-1]["adapter_critic"]["intermediate"]["votes"] == {"2": 1, "3": 2}
    assert response.text.endswith("data: [DONE]\n\n")


async def test_a_request_may_choose_fewer_samples_and_another_extractor(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(*samples('{"answer": "B"}', '{"answer": "b"}'))
    overrides = {"n": 2, "temperature": 0.3, "extract": "json:answer"}
    async with serve(consistent()) as client:
        data = await post(client, chat("m", x_adapter_critic=overrides))
        too_many = await post(client, chat("m", x_adapter_critic={"n": 9}), status=400)
        pattern = await post(client, chat("m", x_adapter_critic={"extract": "regex:(a+)+$"}), status=400)
    assert len(upstream.calls) == 2 and all(call.body["temperature"] == 0.3 for call in upstream.calls)
    assert data["adapter_critic"]["intermediate"]["votes"] == {"b": 2}
    assert "n" in too_many["error"]["message"]
    assert "extract" in pattern["error"]["message"]  # a caller's regular expression is never run


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"n": 0}, "n"),
        ({"n": 17}, "n"),
        ({"temperature": 2.5}, "temperature"),
        ({"extract": "median"}, "unknown extractor"),
        ({"extract": "regex:("}, "not a valid regular expression"),
        ({"sampling": "serial"}, "sampling"),
    ],
)
def test_settings_are_validated(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        consistent(**settings)


async def test_samples_and_the_vote_are_in_the_run_store(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(*samples("so 4", "4.0", "5"))
    top = {"served_models": {"m": {"mode": "self_consistency", "api": API, "n": 3}}}
    async with recording(upstream, f"sqlite:///{tmp_path / 'runs.sqlite3'}", top=top) as (client, store):
        run_id = (await post(client, chat("m")))["adapter_critic"]["run_id"]
        await store.flush()
        detail = (await client.get(f"/runs/{run_id}")).json()
    assert detail["mode"] == "self_consistency"
    assert sorted(stage["stage"] for stage in detail["stages"]) == ["sample:1", "sample:2", "sample:3"]
    assert detail["intermediate"]["votes"] == {"4": 2, "5": 1} and detail["intermediate"]["chosen"] == 0
