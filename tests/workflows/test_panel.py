"""The panel workflow (issue 12): a draft, lenses reviewing it at once, a coordinator, the second pass; the per-run
cap on concurrent upstream calls; degrading on failed lenses; cancelling every lens when the client leaves."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Message

from adapter_critic import ConfigError, create_app
from adapter_critic.workflows.lenses import DEFAULT_COORDINATOR_SYSTEM_PROMPT, DEFAULT_LENSES

from ..conftest import OTHER_URL, UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import post, raw_post, usage_totalling
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API = {"model": "api-model", "base_url": UPSTREAM_URL}
CRITIC = {"model": "critic-model", "base_url": UPSTREAM_URL}
LENSES = [
    {"name": "facts", "system_prompt": "Check the facts."},
    {"name": "tone", "system_prompt": "Check the tone.", "target": {"model": "tone-model", "base_url": UPSTREAM_URL}},
    {"name": "format", "system_prompt": "Check the format."},
]


def panel(**served: Any) -> dict[str, Any]:
    return {"mode": "panel", "api": API, "critic": CRITIC, "lenses": LENSES, **served}


def lens_replies(**critiques: str) -> list[Reply]:
    """A reply per lens, matched by its system prompt, all held until every one arrived (they overlap in time)."""
    prompts = {lens["name"]: lens["system_prompt"] for lens in LENSES}
    return [
        Reply(text, match=prompts[name], gather=len(critiques), group="lenses", usage=usage_totalling(10 + i))
        for i, (name, text) in enumerate(critiques.items())
    ]


async def test_lenses_review_at_once_then_coordinator_then_second_pass(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        Reply("Draft.", model="api-model", usage=usage_totalling(3)),
        *lens_replies(facts="- wrong year", tone="- too curt", format="- wrong year, use a list"),
        Reply("1. [facts, format] wrong year", model="coordinator-model", usage=usage_totalling(7)),
        Reply("Revised.", model="api-model", usage=usage_totalling(5)),
    )
    config = make_config(
        served_models={"m": panel(coordinator={"model": "coordinator-model", "base_url": UPSTREAM_URL})}
    )
    async with serve(config) as client:
        data = await post(client, chat("m", "When?", temperature=0.3))
    draft, *lenses, coordinator, final = upstream.calls
    assert [draft.model, coordinator.model, final.model] == ["api-model", "coordinator-model", "api-model"]
    # Every lens got the draft under its own system prompt, on its own target or the critic's, no request options.
    by_prompt = {call.messages[0]["content"]: call for call in lenses}
    assert set(by_prompt) == {"Check the facts.", "Check the tone.", "Check the format."}
    assert by_prompt["Check the tone."].model == "tone-model" and by_prompt["Check the facts."].model == "critic-model"
    assert all("Draft." in call.messages[1]["content"] and "temperature" not in call.body for call in lenses)
    # The coordinator sees each critique under its lens's name; the second pass gets its merged list.
    merged_input = coordinator.messages[1]["content"]
    assert "[facts]\n- wrong year" in merged_input and "[tone]\n- too curt" in merged_input
    assert coordinator.messages[0]["content"] == DEFAULT_COORDINATOR_SYSTEM_PROMPT
    assert final.messages[1] == {"role": "assistant", "content": "Draft."}
    assert "1. [facts, format] wrong year" in final.messages[2]["content"] and final.body["temperature"] == 0.3
    ext = data["adapter_critic"]
    assert ext["intermediate"] == {
        "api_draft": "Draft.",
        "lenses": {"facts": "- wrong year", "tone": "- too curt", "format": "- wrong year, use a list"},
        "coordinator": "1. [facts, format] wrong year",
        "final": "Revised.",
    }
    assert list(ext["tokens"]["stages"]) == [
        "api_draft",
        *(s for s in ext["tokens"]["stages"] if s.startswith("lens:")),
        "coordinator",
        "api_final",
    ]
    assert {s for s in ext["tokens"]["stages"] if s.startswith("lens:")} == {"lens:facts", "lens:tone", "lens:format"}
    assert data["usage"] == ext["tokens"]["total"]
    assert data["usage"]["total_tokens"] == 3 + 10 + 11 + 12 + 7 + 5
    assert data["choices"][0]["message"]["content"] == "Revised."
    assert "degraded" not in ext


async def test_default_lenses_on_the_critic_target(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    config = make_config(served_models={"m": {"mode": "panel", "api": API, "critic": CRITIC}})
    async with serve(config) as client:
        data = await post(client, chat("m"))
    lens_calls = upstream.calls[1:5]
    assert {call.messages[0]["content"] for call in lens_calls} == {lens.system_prompt for lens in DEFAULT_LENSES}
    assert [call.model for call in upstream.calls] == ["api-model", *["critic-model"] * 5, "api-model"]
    assert list(data["adapter_critic"]["intermediate"]["lenses"]) == [
        "correctness",
        "completeness",
        "instructions",
        "clarity",
    ]


async def test_without_coordinator_the_critiques_are_concatenated(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply("Draft.", model="api-model"), *lens_replies(facts="- A", tone="- B", format="- C"))
    async with serve(make_config(served_models={"m": panel(coordinator=False)})) as client:
        data = await post(client, chat("m"))
    assert len(upstream.calls) == 5  # draft, three lenses, second pass
    second = upstream.calls[-1].messages[-1]["content"]
    assert "[facts]\n- A\n\n[tone]\n- B\n\n[format]\n- C" in second
    assert "coordinator" not in data["adapter_critic"]["intermediate"]
    assert "coordinator" not in data["adapter_critic"]["tokens"]["stages"]


async def test_a_failed_lens_is_left_out(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("Draft.", model="api-model"),
        Reply(status=500, body='{"error": {"message": "tone is down"}}', model="tone-model"),
    )
    async with serve(make_config(served_models={"m": panel(coordinator=False)})) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert set(ext["intermediate"]["lenses"]) == {"facts", "format"}
    assert "tone" in ext["intermediate"]["lens_errors"] and "lens:tone" in ext["intermediate"]["lens_errors"]["tone"]
    assert "[tone]" not in upstream.calls[-1].messages[-1]["content"]
    assert "lens:tone" in ext["tokens"]["stages"]


async def test_every_lens_failing_leaves_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    failing = [Reply(status=503, body="{}", match=lens["system_prompt"]) for lens in LENSES]
    upstream.script(Reply("Draft.", model="api-model"), *failing)
    async with serve(make_config(served_models={"m": panel()})) as client:
        data = await post(client, chat("m"))
    assert len(upstream.calls) == 4  # no coordinator, no second pass
    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == "Draft." == ext["intermediate"]["final"]
    assert ext["degraded"] is True and set(ext["intermediate"]["lens_errors"]) == {"facts", "tone", "format"}


async def test_a_failed_lens_fails_the_request_when_asked(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Draft.", model="api-model"), Reply(status=500, body="{}", model="tone-model"))
    async with serve(make_config(served_models={"m": panel(on_review_error="fail")})) as client:
        data = await post(client, chat("m"), status=502)
    assert "lens:tone" in data["error"]["message"]


async def test_a_failed_coordinator_leaves_the_critiques_concatenated(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        Reply("Draft.", model="api-model"),
        *lens_replies(facts="- A", tone="- B", format="- C"),
        Reply(status=500, body="{}", match=DEFAULT_COORDINATOR_SYSTEM_PROMPT),
    )
    async with serve(make_config(served_models={"m": panel()})) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["degraded"] is True and "coordinator" in ext["intermediate"]["coordinator_error"]
    assert "[facts]\n- A" in upstream.calls[-1].messages[-1]["content"]
    assert data["choices"][0]["message"]["content"].startswith("echo api-model")


async def test_concurrent_upstream_calls_are_capped_per_run(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    lenses = [{"name": f"l{i}", "system_prompt": f"Lens {i}."} for i in range(4)]
    # Two calls are held until both arrived, then the next two: with a cap of 2 no third call can start meanwhile.
    upstream.script(
        Reply("Draft.", model="api-model"),
        *(Reply(f"- {i}", gather=2, group=f"pair{i // 2}", model="critic-model") for i in range(4)),
    )
    served = {"m": {**panel(coordinator=False), "lenses": lenses}}
    async with serve(make_config(served_models=served, max_concurrent_calls_per_run=2)) as client:
        data = await post(client, chat("m"))
    assert upstream.max_in_flight == 2
    assert len(data["adapter_critic"]["intermediate"]["lenses"]) == 4


async def test_the_second_pass_streams_live(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Draft.", model="api-model"), Reply("Streamed revision.", model="api-model"))
    async with serve(make_config(served_models={"m": panel(coordinator=False)})) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert [p for p in pieces if p] == ["Streamed", " revisio", "n."]  # the upstream's own pieces, relayed
    ext = chunks[-1]["adapter_critic"]
    assert set(ext["intermediate"]["lenses"]) == {"facts", "tone", "format"}
    assert ext["intermediate"]["final"] == "Streamed revision."


async def test_leaving_client_cancels_every_lens_call(upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("Draft.", model="api-model"), *(Reply("- x", delay=60, match=lens["system_prompt"]) for lens in LENSES)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(make_config(served_models={"m": panel()}), http_client=upstream_client)
        async with LifespanManager(app) as manager:

            async def receive() -> Message:
                with anyio.fail_after(10):
                    await upstream.until_holding(3)  # every lens call is in flight
                return {"type": "http.disconnect"}

            async def send(message: Message) -> None:
                pass

            await raw_post(manager.app, chat("m", stream=True), receive, send)
    assert sorted(call.messages[0]["content"] for call in upstream.aborted) == sorted(
        lens["system_prompt"] for lens in LENSES
    )
    assert upstream.holding == 0


def test_panel_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="lens names must be unique"):
        make_config(served_models={"m": panel(lenses=[LENSES[0], LENSES[0]])})
    bad_target = {**LENSES[1], "target": {"model": "x"}}
    with pytest.raises(ConfigError, match=r"served_models\.m\.lenses\[0\]\.target"):
        make_config(served_models={"m": panel(lenses=[bad_target])})
    with pytest.raises(ConfigError, match="lenses"):
        make_config(served_models={"m": panel(lenses=[])})
    config = make_config(served_models={"m": panel(coordinator=False)})
    assert "coordinator" not in config.served_models["m"].targets
    assert "lens:tone" in config.served_models["m"].targets  # its credentials are bound like any target's


async def test_progress_tells_of_each_lens_as_it_finishes(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("Draft.", model="api-model"), *lens_replies(facts="- A", tone="- B", format="- C"))
    body = chat("m", stream=True, x_adapter_critic={"progress": True})
    async with serve(make_config(served_models={"m": panel()})) as client:
        response = await client.post("/chat/completions", json=body)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    progress = [c["adapter_critic"]["progress"] for c in chunks if "progress" in c.get("adapter_critic", {})]
    stages = [p["stage"] for p in progress]
    assert stages[0] == "api_draft" and stages[-1] == "coordinator"
    assert sorted(stages[1:4]) == ["lens:facts", "lens:format", "lens:tone"]
    assert all(p["status"] == "ok" for p in progress)


async def test_a_lens_target_gets_its_own_key_only(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-main")
    monkeypatch.setenv("LENS_KEY", "sk-lens")
    own = {"model": "tone-model", "base_url": OTHER_URL, "api_key_env": "LENS_KEY"}
    lenses = [LENSES[0], {**LENSES[1], "target": own}]
    async with serve(make_config(served_models={"m": panel(lenses=lenses, coordinator=False)})) as client:
        await post(client, chat("m"))
    by_model = {call.model: call for call in upstream.calls}
    assert by_model["tone-model"].host == "other.test"
    assert by_model["tone-model"].headers["authorization"] == "Bearer sk-lens"
    assert all(
        call.headers["authorization"] == "Bearer sk-main" for call in upstream.calls if call.model != "tone-model"
    )


async def test_lens_calls_are_retried_like_any_stage_call(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("Draft.", model="api-model"),
        Reply(status=503, body="{}", model="tone-model", usage=None),
        Reply("- fine after all", model="tone-model"),
    )
    config = make_config(served_models={"m": panel(coordinator=False)}, retries=1, retry_backoff_seconds=0)
    async with serve(config) as client:
        data = await post(client, chat("m"))
    ext = data["adapter_critic"]
    assert ext["intermediate"]["lenses"]["tone"] == "- fine after all"
    assert "degraded" not in ext and "lens_errors" not in ext["intermediate"]
    assert [call.model for call in upstream.calls].count("tone-model") == 2
