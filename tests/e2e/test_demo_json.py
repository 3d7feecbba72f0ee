"""Under `response_format` (Responses: `text.format`) every demo workflow answers JSON that validates against the
schema with plausible values — each stage's edit or revision works on the answer inside it, never on the JSON as a
string — plain and streamed."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from adapter_critic.demo import ADAPTER_EDIT, DRAFT_LEAD, PANEL_REVISED_LEAD, REVISED_LEAD
from adapter_critic.demo.answers import ADVISED_LEAD
from adapter_critic.demo.roles import SYNTHESIS_LEAD, VERIFIED_ANSWER_LEAD

from .demo_sdk import MODELS, chat, plausible, responses

# The lead each workflow's answer starts with: the draft, as its last stage left it.
LEADS = {
    "demo-direct": DRAFT_LEAD,
    "demo-adapter": ADAPTER_EDIT,
    "demo-critic": REVISED_LEAD,
    "demo-advisor": ADVISED_LEAD,
    "demo-panel": PANEL_REVISED_LEAD,
    "demo-best-of-3": DRAFT_LEAD,
    "demo-mixture-of-agents": SYNTHESIS_LEAD.format(count=2),  # the aggregator, of the second layer's two answers
    "demo-chain-of-verification": VERIFIED_ANSWER_LEAD.format(count=2),
}
PLACE = {
    "type": "object",
    "$defs": {
        "Country": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
                "continent": {"enum": ["Europe", "Asia", "Africa"]},
            },
            "required": ["name", "code", "continent"],
            "additionalProperties": False,
        }
    },
    "properties": {
        "answer": {"type": "string"},
        "city": {"type": "string"},
        "country": {"$ref": "#/$defs/Country"},
        "population": {"type": "integer", "minimum": 1},
        "founded": {"type": "string", "format": "date"},
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "landmarks": {"type": "array", "items": {"type": "string"}, "minItems": 2, "uniqueItems": True},
        "capital": {"type": "boolean"},
        "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["answer", "city", "country", "population", "founded", "rating", "landmarks", "capital", "nickname"],
    "additionalProperties": False,
}
ASKED = "Where is the Eiffel Tower?"


def fits(text: str, schema: dict[str, Any] = PLACE) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    plausible(value)
    return value


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_json_schema_answers_fit_the_schema(oai: openai.OpenAI, model: str, stream: bool) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE, "strict": True}}
    said = chat(oai, model, ASKED, stream=stream, response_format=response_format)
    value = fits(said.text)
    assert value["answer"].startswith(LEADS[model]) and f'You said: "{ASKED}"' in value["answer"]
    assert said.stop == "stop"

    as_object = chat(oai, model, ASKED, stream=stream, response_format={"type": "json_object"})
    assert json.loads(as_object.text)["answer"].startswith(LEADS[model])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_responses_text_format_fits_the_schema(oai: openai.OpenAI, model: str, stream: bool) -> None:
    text = {"format": {"type": "json_schema", "name": "place", "schema": PLACE, "strict": True}}
    said = responses(oai, model, ASKED, stream=stream, text=text)
    assert fits(said.text)["answer"].startswith(LEADS[model])
    assert said.stop == "completed"


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    steps: list[Step] = Field(min_length=1)
    final_answer: str
    confidence: float = Field(ge=0, le=1)


@pytest.mark.parametrize("model", MODELS)
def test_the_sdks_parse_structured_output(oai: openai.OpenAI, model: str) -> None:
    ask = [{"role": "user", "content": "How can I solve 8x + 7 = -23?"}]
    parsed = oai.chat.completions.parse(model=model, messages=ask, response_format=MathReasoning)  # type: ignore[arg-type]
    reasoning = parsed.choices[0].message.parsed
    assert isinstance(reasoning, MathReasoning) and 0 <= reasoning.confidence <= 1
    plausible(reasoning.model_dump())

    with oai.chat.completions.stream(model=model, messages=ask, response_format=MathReasoning) as events:  # type: ignore[arg-type]
        streamed = events.get_final_completion().choices[0].message.parsed
    assert streamed == reasoning  # the demo model is deterministic

    answered = oai.responses.parse(model=model, input="How can I solve 8x + 7 = -23?", text_format=MathReasoning)
    assert isinstance(answered.output_parsed, MathReasoning)
