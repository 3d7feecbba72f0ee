"""The built-in demo asked through the official SDKs (served by real uvicorn: `conftest.demo_url`): one answer of
each protocol, plain or streamed, read into the same `Said` so that a test can ask all three the same way."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

# The demo models whose every stage honours tools, JSON formats, stop sequences and token limits as checked here.
MODELS = [
    "demo-direct",
    "demo-adapter",
    "demo-critic",
    "demo-advisor",
    "demo-panel",
    "demo-best-of-3",
    "demo-mixture-of-agents",
    "demo-chain-of-verification",
]


@dataclass
class Said:
    """An answer as the tests read it: its text, its tool calls (name, arguments as sent), why it stopped (the
    protocol's own word), the stop sequence that ended it (Anthropic) and the `adapter_critic` extension."""

    text: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    stop: str | None = None
    stop_sequence: str | None = None
    ext: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> list[tuple[str, Any]]:
        return [(name, json.loads(arguments)) for name, arguments in self.calls]


def _extension(obj: Any) -> dict[str, Any]:
    ext: dict[str, Any] = (obj.model_extra or {}).get("adapter_critic") or {}
    return ext


def chat(client: openai.OpenAI, model: str, content: str, *, stream: bool, **options: Any) -> Said:
    """A chat completion's first choice."""
    messages = [{"role": "user", "content": content}]
    if not stream:
        completion = client.chat.completions.create(model=model, messages=messages, **options)
        choice = completion.choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()]
        extra = choice.model_extra or {}
        return Said(
            choice.message.content or "", calls, choice.finish_reason, extra.get("stop_reason"), _extension(completion)
        )
    said = Said()
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True, **options):
        said.ext = _extension(chunk) or said.ext
        for choice in chunk.choices:
            said.text += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                if call.function is not None:
                    names[call.index] = names.get(call.index, "") + (call.function.name or "")
                    arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
            if choice.finish_reason is not None:
                said.stop = choice.finish_reason
    said.calls = [(names[i], arguments[i]) for i in sorted(names)]
    return said


def messages(client: anthropic.Anthropic, model: str, content: str, *, stream: bool, **options: Any) -> Said:
    """A Messages answer (streamed: the SDK's accumulated final message)."""
    options.setdefault("max_tokens", 1024)
    ask = {"model": model, "messages": [{"role": "user", "content": content}], **options}
    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)
    said = Said(stop=message.stop_reason, stop_sequence=message.stop_sequence, ext=_extension(message))
    for block in message.content:
        if block.type == "text":
            said.text += block.text
        elif block.type == "tool_use":
            said.calls.append((block.name, json.dumps(block.input)))
    return said


def responses(client: openai.OpenAI, model: str, content: str, *, stream: bool, **options: Any) -> Said:
    """A Responses answer (`stop`: its status, or why it is incomplete; streamed: the last event's response)."""
    if stream:
        final = None
        for event in client.responses.create(model=model, input=content, stream=True, **options):
            final = getattr(event, "response", final)
        assert final is not None
        response = final
    else:
        response = client.responses.create(model=model, input=content, **options)
    incomplete = response.incomplete_details
    said = Said(stop=incomplete.reason if incomplete is not None else response.status, ext=_extension(response))
    for item in response.output:
        if item.type == "message":
            said.text += "".join(part.text for part in item.content if part.type == "output_text")
        elif item.type == "function_call":
            said.calls.append((item.name, item.arguments))
    return said


def plausible(value: Any) -> None:
    """Every string in `value` is short and not JSON: a field does not hold the whole draft, nor JSON as text."""
    if isinstance(value, dict):
        for item in value.values():
            plausible(item)
    elif isinstance(value, list):
        for item in value:
            plausible(item)
    elif isinstance(value, str):
        assert value.strip() and len(value) < 200, value
        assert not value.lstrip().startswith(("{", "[")) and '{"' not in value, value
