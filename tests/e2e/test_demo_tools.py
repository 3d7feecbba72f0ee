"""The demo model honours `tool_choice` in every workflow, through each protocol, plain and streamed: it calls a
tool when it must (the named one, or any), never when told not to, and its arguments fit the tool's schema with
plausible values — so structured output by function calling (the SDKs' `parse`, LangChain's
`with_structured_output`) returns objects on `demo-*`."""

from __future__ import annotations

import datetime
from typing import Any, Literal

import anthropic
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from adapter_critic.demo import CRITIQUE

from .demo_sdk import MODELS, Said, chat, messages, plausible, responses

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "hourly": {"type": "boolean"},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
SEARCH = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "exclusiveMinimum": 0}},
    "required": ["query"],
}
SCHEMAS = {"get_weather": WEATHER, "search_web": SEARCH}
ASKED = "Hello there, what should I wear tomorrow?"


def openai_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "parameters": s}} for name, s in SCHEMAS.items()]


def fits(said: Said, name: str, content: str = ASKED) -> None:
    """`said` is one call of `name` whose arguments validate against its schema and read as a model's would."""
    [(called, arguments)] = said.arguments()
    assert called == name
    jsonschema.validate(arguments, SCHEMAS[name])
    plausible(arguments)
    if name == "search_web":
        assert arguments["query"] == content  # what the user asked is the query


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_openai_tool_choice(oai: openai.OpenAI, model: str, stream: bool) -> None:
    tools = openai_tools()
    required = chat(oai, model, ASKED, stream=stream, tools=tools, tool_choice="required")
    fits(required, "get_weather")  # no tool named: the first one
    assert required.stop == "tool_calls"

    named = {"type": "function", "function": {"name": "search_web"}}
    forced = chat(oai, model, "Use get_weather for Paris.", stream=stream, tools=tools, tool_choice=named)
    fits(forced, "search_web", "Use get_weather for Paris.")  # the named tool, though the user named another

    refused = chat(oai, model, "Use get_weather for Paris.", stream=stream, tools=tools, tool_choice="none")
    assert refused.calls == [] and refused.stop == "stop" and "not a real LLM" in refused.text

    auto = chat(oai, model, ASKED, stream=stream, tools=tools, tool_choice="auto")
    assert auto.calls == [] and auto.stop == "stop"
    fits(chat(oai, model, "Use get_weather for Paris.", stream=stream, tools=tools), "get_weather")
    if model == "demo-critic" and not stream:  # the reviewer got no tools and no tool_choice: it answered in text
        assert required.ext["intermediate"]["critic"] == CRITIQUE


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_anthropic_tool_choice(claude: anthropic.Anthropic, model: str, stream: bool) -> None:
    tools = [{"name": name, "input_schema": schema} for name, schema in SCHEMAS.items()]
    forced = messages(claude, model, ASKED, stream=stream, tools=tools, tool_choice={"type": "any"})
    fits(forced, "get_weather")
    assert forced.stop == "tool_use"

    chosen = {"type": "tool", "name": "search_web"}
    named = messages(claude, model, "Use get_weather for Paris.", stream=stream, tools=tools, tool_choice=chosen)
    fits(named, "search_web", "Use get_weather for Paris.")

    refused = messages(claude, model, "Use get_weather.", stream=stream, tools=tools, tool_choice={"type": "none"})
    assert refused.calls == [] and refused.stop == "end_turn" and "not a real LLM" in refused.text

    auto = messages(claude, model, "get_weather, please", stream=stream, tools=tools, tool_choice={"type": "auto"})
    fits(auto, "get_weather", "get_weather, please")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", MODELS)
def test_responses_tool_choice(oai: openai.OpenAI, model: str, stream: bool) -> None:
    tools = [{"type": "function", "name": name, "parameters": s, "strict": False} for name, s in SCHEMAS.items()]
    fits(responses(oai, model, ASKED, stream=stream, tools=tools, tool_choice="required"), "get_weather")
    named = {"type": "function", "name": "search_web"}
    fits(responses(oai, model, ASKED, stream=stream, tools=tools, tool_choice=named), "search_web")
    refused = responses(oai, model, "Use get_weather.", stream=stream, tools=tools, tool_choice="none")
    assert refused.calls == [] and refused.stop == "completed" and "not a real LLM" in refused.text


def test_a_named_tool_that_is_not_offered_is_refused(oai: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "send_email"}}
    with pytest.raises(openai.BadRequestError, match="send_email"):
        chat(oai, "demo-direct", ASKED, stream=False, tools=openai_tools(), tool_choice=named)


# -- structured output by function calling, as the SDKs (and LangChain) do it -------------------------------------


class Address(BaseModel):
    street: str
    city: str
    postcode: str = Field(pattern=r"^\d{5}$")


class Person(BaseModel):
    """Someone the user mentioned."""

    name: str
    age: int = Field(ge=18, le=120)
    born: datetime.date
    mood: Literal["happy", "sad"]
    home: Address
    previous: list[Address] = []
    nickname: str | None = None
    friends: list[Person] = []
    summary: str


@pytest.mark.parametrize("model", MODELS)
def test_structured_output_by_function_calling(oai: openai.OpenAI, claude: anthropic.Anthropic, model: str) -> None:
    # The OpenAI SDK's strict tool from a Pydantic model, forced by name: what `with_structured_output(Person,
    # method="function_calling")` sends. `parse` reads the arguments back into the model.
    ask = [{"role": "user", "content": "Tell me about my neighbour."}]
    tool = openai.pydantic_function_tool(Person)
    forced = {"type": "function", "function": {"name": "Person"}}
    parsed = oai.chat.completions.parse(model=model, messages=ask, tools=[tool], tool_choice=forced)  # type: ignore[arg-type]
    [call] = parsed.choices[0].message.tool_calls or []
    person = call.function.parsed_arguments
    assert isinstance(person, Person) and person.home.postcode.isdigit() and person.mood in ("happy", "sad")
    plausible(person.model_dump(mode="json"))

    # Anthropic: the model's JSON schema (with `$defs` and `$ref`s) as a tool's `input_schema`, forced by name.
    tools = [{"name": "Person", "input_schema": Person.model_json_schema()}]
    message = claude.messages.create(
        model=model, max_tokens=1024, messages=ask, tools=tools, tool_choice={"type": "tool", "name": "Person"}
    )
    [block] = message.content
    assert block.type == "tool_use" and block.name == "Person"
    plausible(Person.model_validate(block.input).model_dump(mode="json"))
