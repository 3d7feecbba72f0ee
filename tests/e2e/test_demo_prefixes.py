"""The demo serves every workflow by its prefix, and chains, over the demo model (`critic-demo`,
`best_of_n&critic-demo`): asked through the openai and anthropic SDKs of the standalone server in real uvicorn."""

from __future__ import annotations

import anthropic
import openai
import pytest

from adapter_critic.demo import REVISED_LEAD
from adapter_critic.workflows import registry

QUESTION = "What is 2 + 2?"


@pytest.mark.parametrize("prefix", sorted(registry.prefixes()))
def test_every_prefix_runs_over_the_demo_model(oai: openai.OpenAI, prefix: str) -> None:
    reply = oai.chat.completions.create(model=f"{prefix}-demo", messages=[{"role": "user", "content": QUESTION}])
    assert reply.model == f"{prefix}-demo"
    assert reply.choices[0].message.content
    extension = reply.model_extra["adapter_critic"] if reply.model_extra else {}
    assert extension["mode"] == registry.prefixes()[prefix]


def test_a_chain_runs_its_workflows_in_turn(oai: openai.OpenAI, claude: anthropic.Anthropic) -> None:
    reply = oai.chat.completions.create(model="best_of_n&critic-demo", messages=[{"role": "user", "content": QUESTION}])
    assert reply.choices[0].message.content.startswith(REVISED_LEAD)  # the critic's revision is the answer
    extension = reply.model_extra["adapter_critic"] if reply.model_extra else {}
    assert extension["mode"] == "critic" and extension["nested"]["api_draft"][0]["mode"] == "best_of_n"
    message = claude.messages.create(
        model="critic-demo", max_tokens=200, messages=[{"role": "user", "content": QUESTION}]
    )
    assert message.content[0].type == "text" and message.content[0].text.startswith(REVISED_LEAD)


def test_the_demos_model_list_stays_its_served_models(oai: openai.OpenAI) -> None:
    assert "critic-demo" not in [model.id for model in oai.models.list()]  # a set without end is never listed
    assert oai.models.retrieve("critic-demo").id == "critic-demo"
