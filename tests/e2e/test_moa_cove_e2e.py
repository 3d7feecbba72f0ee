"""End to end, the mixture_of_agents and chain_of_verification workflows: real `uvicorn adapter_critic.asgi:app` in
front of the scripted upstream running as a server, driven with the official `openai` SDK, plain and streamed.

The upstream checks what it is sent: each layer's proposers (and the verification questions) are held until every
one of them has arrived, so calls made one after another would time out and fail the test. The servers start once
per module; each test resets the upstream's script and recorded calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from adapter_critic.workflows.synthesis import DEFAULT_SYNTHESIS_PROMPT, RESPONSES_OPEN
from adapter_critic.workflows.verification import VERIFIED_LEAD

from ..conftest import RemoteUpstream, run_app, sdk
from ..helpers import extension

ASKED = "Name a prime."
BASELINE = "Sydney is the capital of Australia, and 9 is prime."


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
default_api_key_env = "UP_KEY"
retries = 0

[served_models.e2e-moa]
mode = "mixture_of_agents"
api = {{ model = "api-model", base_url = "{up}" }}
aggregator = {{ model = "aggregator-model", base_url = "{up}" }}
layers = [
  [
    {{ target = {{ model = "alpha-model", base_url = "{up}" }}, options = {{ temperature = 0.2 }} }},
    {{ target = {{ model = "beta-model", base_url = "{up}" }}, options = {{ temperature = 0.6 }} }},
    {{ options = {{ temperature = 1.0 }} }},
  ],
  [{{ target = {{ model = "alpha-model", base_url = "{up}" }} }}, {{ options = {{ seed = 7 }} }}],
]

[served_models.e2e-cove]
mode = "chain_of_verification"
api = {{ model = "api-model", base_url = "{up}" }}
verifier = {{ model = "verifier-model", base_url = "{up}", options = {{ temperature = 0 }} }}
max_questions = 2
"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory, upstream_url: str) -> Iterator[str]:
    """The app in front of the module's scripted upstream (`upstream_url`, which `up` scripts)."""
    path: Path = tmp_path_factory.mktemp("moa_cove") / "config.toml"
    with run_app(path, config_toml(upstream_url), UP_KEY="sk-e2e-moa-cove") as (url, _):
        yield url


@pytest.fixture
def client(app_url: str) -> OpenAI:
    return sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))


def ask(client: OpenAI, model: str, stream: bool) -> tuple[str, dict[str, Any], int | None]:
    """The answer's text, the extension (of the last chunk, streamed) and the total tokens (plain only)."""
    messages: list[Any] = [{"role": "user", "content": ASKED}]
    if not stream:
        response = client.chat.completions.create(model=model, messages=messages, temperature=0.5)
        assert response.usage is not None
        return response.choices[0].message.content or "", extension(response), response.usage.total_tokens
    text, ext = "", {}
    for chunk in client.chat.completions.create(model=model, messages=messages, temperature=0.5, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.model_extra and "adapter_critic" in chunk.model_extra:
            ext = chunk.model_extra["adapter_critic"]
    return text, ext, None


def held(group: str, *replies: dict[str, Any]) -> list[dict[str, Any]]:
    """`replies`, each held until every one's call arrived (within 10 s, else answered 500)."""
    return [{**reply, "gather": len(replies), "group": group} for reply in replies]


def system_of(call: dict[str, Any]) -> str:
    content: str = call["body"]["messages"][0]["content"]
    return content


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_mixture_of_agents(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    up.script(
        *held("first", {"content": "Nine.", "model": "alpha-model"}, {"content": "Seven.", "model": "beta-model"}),
        {"content": "Eleven.", "model": "api-model", "gather": 3, "group": "first"},
        *held(
            "second",
            {"content": "Seven or eleven.", "model": "alpha-model", "match": RESPONSES_OPEN},
            {"content": "Seven; nine is not prime.", "model": "api-model", "match": RESPONSES_OPEN},
        ),
        {"content": "Seven and eleven are prime.", "model": "aggregator-model"},
    )
    text, ext, total = ask(client, "e2e-moa", stream)
    assert text == "Seven and eleven are prime."
    assert ext["intermediate"]["layers"] == [
        ["Nine.", "Seven.", "Eleven."],
        ["Seven or eleven.", "Seven; nine is not prime."],
    ]
    assert total in (None, 6 * 3)
    calls = up.calls()
    first, second, aggregator = calls[:3], calls[3:5], calls[5]
    assert {c["body"]["model"]: c["body"]["temperature"] for c in first} == {
        "alpha-model": 0.2,
        "beta-model": 0.6,
        "api-model": 1.0,
    }
    assert all(c["body"]["messages"] == [{"role": "user", "content": ASKED}] for c in first)
    assert {c["body"]["model"]: c["body"].get("seed") for c in second} == {"alpha-model": None, "api-model": 7}
    assert all("<response_3>\nEleven.\n</response_3>" in system_of(c) for c in second)
    assert system_of(aggregator).startswith(DEFAULT_SYNTHESIS_PROMPT) and "Nine." not in system_of(aggregator)
    assert aggregator["body"]["temperature"] == 0.5  # the request's options, like every API-stage call
    assert [c["body"].get("stream", False) for c in calls] == [False] * 5 + [stream]  # only the answer streams


def test_mixture_of_agents_leaves_out_a_failed_proposer(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {"content": "Nine.", "model": "alpha-model"},
        {"status": 500, "body": '{"error": {"message": "beta is down"}}', "model": "beta-model"},
        {"content": "Eleven.", "model": "api-model"},
        {"content": "Seven.", "model": "aggregator-model"},
    )
    text, ext, _ = ask(client, "e2e-moa", stream=False)
    assert ext["degraded"] is True and list(ext["intermediate"]["proposer_errors"]) == ["proposer:1.2"]
    assert ext["intermediate"]["layers"][0] == ["Nine.", None, "Eleven."]
    assert len(up.calls()) == 3 + 2 + 1 and text == "Seven."


def cove_script(up: RemoteUpstream, first: dict[str, Any], second: dict[str, Any]) -> None:
    plan = "1. What is the capital of Australia?\n2. Is 9 a prime number?\n3. What is the largest city of Australia?"
    up.script(
        {"content": BASELINE, "model": "api-model", "match": ASKED},
        {"content": plan, "model": "verifier-model", "match": "<draft_reply>"},
        *held(
            "verify",
            {**first, "model": "verifier-model", "match": "What is the capital of Australia?"},
            {**second, "model": "verifier-model", "match": "Is 9 a prime number?"},
        ),
        {
            "content": "Canberra is the capital of Australia, and 7 is prime.",
            "model": "api-model",
            "match": VERIFIED_LEAD,
        },
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chain_of_verification(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    cove_script(up, {"content": "Canberra."}, {"content": "No: 9 is 3 x 3."})
    text, ext, total = ask(client, "e2e-cove", stream)
    assert text == "Canberra is the capital of Australia, and 7 is prime."
    assert ext["intermediate"]["questions"] == ["What is the capital of Australia?", "Is 9 a prime number?"]
    assert ext["intermediate"]["verifications"] == [
        {"question": "What is the capital of Australia?", "answer": "Canberra."},
        {"question": "Is 9 a prime number?", "answer": "No: 9 is 3 x 3."},
    ]
    assert total in (None, 5 * 3)
    calls = up.calls()
    baseline, plan, verify, final = calls[0], calls[1], calls[2:4], calls[4]
    assert baseline["body"]["temperature"] == 0.5 and plan["body"]["temperature"] == 0  # the verifier's own options
    assert BASELINE in plan["body"]["messages"][1]["content"]
    for call in verify:  # asked alone: neither the baseline nor the conversation
        shown = json.dumps(call["body"]["messages"])
        assert "Sydney is the capital" not in shown and ASKED not in shown and call["body"]["temperature"] == 0
    revise = final["body"]["messages"]
    assert revise[1] == {"role": "assistant", "content": BASELINE}
    assert "Question 2: Is 9 a prime number?\nAnswer: No: 9 is 3 x 3." in revise[2]["content"]
    assert [c["body"].get("stream", False) for c in calls] == [False] * 4 + [stream]


def test_chain_of_verification_leaves_out_a_failed_question(client: OpenAI, up: RemoteUpstream) -> None:
    cove_script(up, {"content": "Canberra."}, {"status": 503, "body": "{}"})
    text, ext, _ = ask(client, "e2e-cove", stream=True)
    assert ext["degraded"] is True and list(ext["intermediate"]["verify_errors"]) == ["verify:2"]
    assert "Is 9 a prime number?" not in up.calls()[-1]["body"]["messages"][2]["content"]
    assert text == "Canberra is the capital of Australia, and 7 is prime."
