"""Cost per stage and per run (docs/guides/cost.md), end to end: real `uvicorn adapter_critic.asgi:app` with a price
table, in front of the scripted upstream running as a real server, asked with the official `openai` SDK.

Prices are per million tokens; the scripted usage makes every expected amount a short sum."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from adapter_critic import Config

from ..conftest import AppFactory, RemoteUpstream, chat, make_config, run_app, sdk
from ..docs.snippets import ROOT, collect
from ..helpers import extension, usage
from ..scripted_upstream import Reply, ScriptedUpstream

MESSAGES: list[Any] = [{"role": "user", "content": "What does a stage cost?"}]


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"

    def critic(name: str, reviewer: str) -> str:
        return f"""
[served_models.{name}]
mode = "critic"
api = {{ model = "api-model", base_url = "{up}" }}
critic = {{ model = "{reviewer}", base_url = "{up}" }}
"""

    return f"""
retries = 0
default_api_key_env = "COST_UP_KEY"

[pricing]
currency = "EUR"

[prices."api-model"]
input = 2.0
output = 8.0
cached_input = 0.5

[prices."reviewer-mini*"]  # listed first: it wins over the broader glob below
input = 0.1
output = 0.4

[prices."reviewer-*"]
input = 1.0
output = 4.0

[prices."reviewer-exact"]  # an exact name wins over any glob, wherever it is listed
input = 3.0
output = 12.0

[prices."claude-*"]
input = 3.0
output = 15.0
cached_input = 0.3
{critic("c-glob", "reviewer-big")}
{critic("c-mini", "reviewer-mini-2")}
{critic("c-exact", "reviewer-exact")}
{critic("c-unpriced", "unpriced-model")}

[served_models.d-direct]
mode = "direct"
api = {{ model = "api-model", base_url = "{up}" }}

[served_models.d-anthropic]
mode = "direct"
api = {{ model = "claude-test", base_url = "{up}", protocol = "anthropic" }}

[served_models.d-fallback]
mode = "direct"
api = {{ model = "down-model", base_url = "{up}", fallbacks = [{{ model = "api-model", base_url = "{up}" }}] }}
"""


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("cost") / "config.toml"
    with run_app(path, config_toml(upstream_url), COST_UP_KEY="", ADAPTER_CRITIC_STORE="none") as (url, _):
        yield url


@pytest.fixture
def up(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url).reset()


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0))


def cached(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """Usage of `prompt` tokens, `cached` of them read from the upstream's cache."""
    return {**usage(prompt, completion), "prompt_tokens_details": {"cached_tokens": cached}}


def cost_of(response: Any) -> dict[str, Any]:
    cost: dict[str, Any] = extension(response)["cost"]
    return cost


def critic_run(client: OpenAI, up: RemoteUpstream, served: str, reviewer: str) -> dict[str, Any]:
    up.script(
        {"model": "api-model", "content": "Draft.", "usage": cached(1000, 200, 600)},
        {"model": reviewer, "content": "Say more.", "usage": usage(500, 100)},
        {"model": "api-model", "content": "Final.", "usage": cached(2000, 300, 1000)},
    )
    return cost_of(client.chat.completions.create(model=served, messages=MESSAGES))


# The API stages of `critic_run` at api-model's prices: uncached input 2, cached input 0.5, output 8 per million.
DRAFT = (400 * 2 + 600 * 0.5 + 200 * 8) / 1e6
FINAL = (1000 * 2 + 1000 * 0.5 + 300 * 8) / 1e6


def test_every_stage_is_priced_by_its_model_with_cached_input_at_its_own_price(
    client: OpenAI, up: RemoteUpstream
) -> None:
    cost = critic_run(client, up, "c-glob", "reviewer-big")
    critic = (500 * 1.0 + 100 * 4.0) / 1e6  # `reviewer-*`: `reviewer-mini*` does not match
    assert cost == {
        "currency": "EUR",
        "stages": {
            "api_draft": pytest.approx(DRAFT),
            "critic": pytest.approx(critic),
            "api_final": pytest.approx(FINAL),
        },
        "total": pytest.approx(DRAFT + critic + FINAL),
        "total_known": pytest.approx(DRAFT + critic + FINAL),
        "unknown_stages": [],
    }


def test_the_first_listed_glob_wins_and_an_exact_name_wins_over_every_glob(client: OpenAI, up: RemoteUpstream) -> None:
    mini = critic_run(client, up, "c-mini", "reviewer-mini-2")
    exact = critic_run(client, up, "c-exact", "reviewer-exact")
    assert mini["stages"]["critic"] == pytest.approx((500 * 0.1 + 100 * 0.4) / 1e6)
    assert exact["stages"]["critic"] == pytest.approx((500 * 3.0 + 100 * 12.0) / 1e6)


def test_a_stage_without_a_price_is_unknown_and_so_is_the_total_with_the_known_part_kept(
    client: OpenAI, up: RemoteUpstream
) -> None:
    cost = critic_run(client, up, "c-unpriced", "unpriced-model")
    assert cost["stages"] == {"api_draft": pytest.approx(DRAFT), "critic": None, "api_final": pytest.approx(FINAL)}
    assert cost["total"] is None
    assert cost["total_known"] == pytest.approx(DRAFT + FINAL)
    assert cost["unknown_stages"] == ["critic"]


def test_a_stage_whose_upstream_reported_no_usage_is_unknown_not_free(client: OpenAI, up: RemoteUpstream) -> None:
    up.script({"model": "api-model", "content": "No usage here.", "usage": None})
    cost = cost_of(client.chat.completions.create(model="d-direct", messages=MESSAGES))
    assert cost == {
        "currency": "EUR",
        "stages": {"api": None},
        "total": None,
        "total_known": 0.0,
        "unknown_stages": ["api"],
    }


def test_anthropic_cache_reads_are_priced_as_cached_input(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {
            "model": "claude-test",
            "anthropic_usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 50},
        }
    )
    cost = cost_of(client.chat.completions.create(model="d-anthropic", messages=MESSAGES))
    assert cost["total"] == pytest.approx((100 * 3.0 + 900 * 0.3 + 50 * 15.0) / 1e6)


def test_a_refused_attempt_costs_nothing_and_the_fallback_is_priced(client: OpenAI, up: RemoteUpstream) -> None:
    refusal = '{"error": {"message": "overloaded"}}'
    up.script(
        {"model": "down-model", "status": 503, "body": refusal},
        {"model": "api-model", "content": "From the fallback.", "usage": usage(100, 10)},
    )
    cost = cost_of(client.chat.completions.create(model="d-fallback", messages=MESSAGES))
    assert up.models() == ["down-model", "api-model"]
    assert cost["stages"] == {"api": pytest.approx((100 * 2.0 + 10 * 8.0) / 1e6)}  # `down-model` has no price
    assert cost["unknown_stages"] == []


def test_a_streamed_run_reports_its_cost_on_the_last_chunk(client: OpenAI, up: RemoteUpstream) -> None:
    up.script({"model": "api-model", "content": "Streamed.", "usage": cached(1000, 100, 200)})
    chunks = list(
        client.chat.completions.create(
            model="d-direct", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    extensions = [
        chunk.model_extra["adapter_critic"] for chunk in chunks if (chunk.model_extra or {}).get("adapter_critic")
    ]
    assert len(extensions) == 1
    assert extensions[0]["cost"]["total"] == pytest.approx((800 * 2.0 + 200 * 0.5 + 100 * 8.0) / 1e6)


# -- in-process: without prices, and in every protocol --------------------------------------------------------------


@pytest.mark.anyio
async def test_without_prices_no_cost_is_reported(serve: AppFactory) -> None:
    async with serve(make_config()) as client:
        response = await client.post("/chat/completions", json=chat("m-critic"))
    extension = response.json()["adapter_critic"]
    assert extension["tokens"]["total"]["total_tokens"] == 9 and "cost" not in extension


@pytest.mark.anyio
async def test_the_cost_rides_on_every_protocols_answer(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    config = make_config(prices={"api-model": {"input": 1, "output": 1}, "critic-model": {"input": 2, "output": 2}})
    async with serve(config) as client:
        answers = [
            await client.post("/chat/completions", json=chat("m-critic")),
            await client.post("/messages", json={**chat("m-critic"), "max_tokens": 100}),
            await client.post("/responses", json={"model": "m-critic", "input": "Hello"}),
        ]
    expected = {
        "currency": "USD",
        "stages": {"api_draft": 3e-6, "critic": 6e-6, "api_final": 3e-6},  # each call: 1 in, 2 out (the default)
        "total": 12e-6,
        "total_known": 12e-6,
        "unknown_stages": [],
    }
    for answer in answers:
        assert answer.status_code == 200
        assert answer.json()["adapter_critic"]["cost"] == expected


@pytest.mark.anyio
async def test_the_cost_guides_worked_example_is_what_the_server_computes(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    """docs/guides/cost.md: its config, asked once with its usage, answers its extension's `cost`."""
    blocks = [snippet for snippet in collect(ROOT / "docs" / "guides" / "cost.md") if snippet.lang in ("toml", "json")]
    config = Config.from_dict(tomllib.loads(blocks[0].code))
    documented = json.loads(blocks[1].code)["adapter_critic"]
    stages = documented["tokens"]["stages"]
    upstream.script(
        Reply("Draft.", model="gpt-4.1-mini", usage=stages["api_draft"]),
        Reply(
            "Critique.",
            model="claude-sonnet-4",
            anthropic_usage={
                "input_tokens": stages["critic"]["prompt_tokens"],
                "cache_read_input_tokens": 0,
                "output_tokens": stages["critic"]["completion_tokens"],
            },
        ),
        Reply("Final.", model="gpt-4.1-mini", usage=stages["api_final"]),
    )
    async with serve(config) as client:
        answer = (await client.post("/chat/completions", json=chat("reviewed"))).json()["adapter_critic"]
    assert answer["tokens"] == documented["tokens"]
    assert answer["cost"] == documented["cost"]
