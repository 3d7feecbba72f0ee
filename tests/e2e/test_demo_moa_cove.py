"""The demo's mixture-of-agents and chain-of-verification models, asked through the demo server (real uvicorn) with
the openai SDK: each stage's reply says what it did, so the technique can be seen at work."""

from __future__ import annotations

import openai
import pytest

from adapter_critic.demo import DRAFT_LEAD
from adapter_critic.demo.roles import CHECKS, SYNTHESIS_LEAD, VERIFIED_ANSWER_LEAD

from .demo_sdk import chat

ASKED = "What is the capital of Australia?"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_demo_mixture_of_agents_synthesises_each_layer(oai: openai.OpenAI, stream: bool) -> None:
    said = chat(oai, "demo-mixture-of-agents", ASKED, stream=stream)
    first, second = said.ext["intermediate"]["layers"]
    # Three proposers, each sampled with its own seed; two more, each a synthesis of those three.
    assert [text.splitlines()[0] for text in first] == [DRAFT_LEAD] * 3
    assert [text.splitlines()[-1] for text in first] == [f"(Demo candidate sampled with seed {s}.)" for s in (1, 2, 3)]
    assert all(text.startswith(SYNTHESIS_LEAD.format(count=3)) for text in second)
    assert all("(It read the responses sampled with seeds 1, 2, 3.)" in text for text in second)
    # The aggregator read the second layer's two answers.
    assert said.text == (
        f'{SYNTHESIS_LEAD.format(count=2)}\nYou said: "{ASKED}"\n(It read the responses sampled with seeds 11, 12.)'
    )
    assert list(said.ext["tokens"]["stages"])[-1] == "aggregator" and len(said.ext["tokens"]["stages"]) == 6


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_demo_chain_of_verification_revises_after_independent_checks(oai: openai.OpenAI, stream: bool) -> None:
    said = chat(oai, "demo-chain-of-verification", ASKED, stream=stream)
    intermediate = said.ext["intermediate"]
    assert intermediate["baseline"] == f'{DRAFT_LEAD}\nYou said: "{ASKED}"'
    assert intermediate["questions"] == list(CHECKS)
    assert intermediate["verifications"] == [{"question": q, "answer": a} for q, a in CHECKS.items()]
    assert said.text == f'{VERIFIED_ANSWER_LEAD.format(count=2)} (this is not a real LLM).\nYou said: "{ASKED}"'
    stages = list(said.ext["tokens"]["stages"])  # the verification questions in the order they were answered
    assert stages[:2] == ["baseline", "plan"] and sorted(stages[2:4]) == ["verify:1", "verify:2"]
    assert stages[4:] == ["final"]
