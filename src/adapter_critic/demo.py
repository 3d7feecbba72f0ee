"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The built-in demo: a small deterministic *demo model* (not a real LLM) and the config serving it.

The demo model calls a tool when the last user message names one of the request's `tools`, and answers valid
JSON under `response_format` (`json_object`, or `json_schema` with the schema's required keys), so tool calling
and structured output can be tried offline.

`uvicorn adapter_critic.asgi:app` without `ADAPTER_CRITIC_CONFIG` serves `demo-direct`, `demo-adapter`,
`demo-critic`, `demo-advisor`, `demo-panel` and `demo-best-of-3`, whose stages call the demo model in-process,
so every built-in workflow can be seen working with no API key and no network.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .config import Config, ServedModel, Target
from .demo_answers import (
    ADVISED_LEAD,
    PANEL_LEAD,
    advised,
    candidate_note,
    drafted_calls,
    stage_reply,
    structured,
    tool_call,
)
from .errors import error_envelope
from .workflows.prompts import (
    DEFAULT_ADAPTER_SYSTEM_PROMPT,
    DEFAULT_CRITIC_SYSTEM_PROMPT,
    SECOND_PASS_INSTRUCTION,
    content_text,
)

DEMO_MODEL = "adapter-critic-demo-model"
DEMO_BASE_URL = "/demo/v1"
DRAFT_LEAD = "Demo model draft (this is not a real LLM)."
ADAPTER_EDIT = "Demo model draft (this is not a real LLM), checked by the demo adapter."
CRITIQUE = "- The draft does not say that a reviewer checked it; say so in the revised answer."
SECOND_PASS_LEAD = SECOND_PASS_INSTRUCTION.partition("{critique}")[0]  # how the critic's second pass begins
REVISED_LEAD = "Demo model, revised after the demo critic's review (this is not a real LLM)."
PANEL_REVISED_LEAD = "Demo model, revised after the demo panel's review (this is not a real LLM)."


class _DemoMessage(msgspec.Struct):
    role: str
    content: str | list[Any] | None = None


class _DemoRequest(msgspec.Struct):
    messages: list[_DemoMessage]
    model: str = DEMO_MODEL
    stream: bool = False
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    n: int = 1


_request_decoder = msgspec.json.Decoder(_DemoRequest)


def demo_config() -> Config:
    target = Target(model=DEMO_MODEL, base_url=DEMO_BASE_URL)
    return Config(
        served_models={
            "demo-direct": ServedModel(mode="direct", api=target),
            "demo-adapter": ServedModel(mode="adapter", api=target),
            "demo-critic": ServedModel(mode="critic", api=target),
            "demo-advisor": ServedModel(mode="advisor", api=target),
            "demo-panel": ServedModel(mode="panel", api=target),
            "demo-best-of-3": ServedModel(
                mode="best_of_n", api=target, settings={"n": 3, "candidate_options": {"temperature": 0.8, "seed": 1}}
            ),
        }
    )


def demo_reply(messages: list[_DemoMessage], seed: int | None = None) -> str:
    """What the demo model says: it recognises the default reviewer prompts and plays each stage's part."""
    system = content_text(messages[0].content) if messages and messages[0].role == "system" else ""
    last = content_text(messages[-1].content) if messages else ""
    reply = stage_reply(system, last)
    if reply is not None:
        return reply
    if system == DEFAULT_ADAPTER_SYSTEM_PROMPT:
        if DRAFT_LEAD in last:
            return f"<<<<<<< SEARCH\n{DRAFT_LEAD}\n=======\n{ADAPTER_EDIT}\n>>>>>>> REPLACE"
        return "lgtm"
    if system == DEFAULT_CRITIC_SYSTEM_PROMPT:
        return CRITIQUE
    if last.startswith(SECOND_PASS_LEAD) and len(messages) >= 2:
        draft = content_text(messages[-2].content)
        return draft.replace(DRAFT_LEAD, PANEL_REVISED_LEAD if PANEL_LEAD[2:] in last else REVISED_LEAD, 1)
    user, was_advised = advised(next((content_text(m.content) for m in reversed(messages) if m.role == "user"), ""))
    said = " ".join(user.split())[:200]
    return f'{ADVISED_LEAD if was_advised else DRAFT_LEAD}\nYou said: "{said}"{candidate_note(seed)}'


def demo_tool_calls(messages: list[_DemoMessage], tools: list[Any] | None) -> list[Any] | None:
    """The tool calls the demo model makes: one of a tool the last user message names; in a second pass, the
    calls of the draft under revision (it still wants them)."""
    if not tools or not messages or messages[-1].role != "user":
        return None
    last = content_text(messages[-1].content)
    if last.startswith(SECOND_PASS_LEAD) and len(messages) >= 2:
        return drafted_calls(content_text(messages[-2].content))
    call = tool_call(tools, last)
    return [call] if call is not None else None


async def _chat_completions(request: Request) -> Response:
    try:
        demo = _request_decoder.decode(await request.body())
    except msgspec.DecodeError as exc:
        error = error_envelope(f"demo model: {exc}", "invalid_request_error")
        return Response(msgspec.json.encode(error), status_code=400, media_type="application/json")
    calls = demo_tool_calls(demo.messages, demo.tools)
    message: dict[str, Any]
    if calls:  # the user asked for a tool by name (or the draft being revised called one): call it
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        reply, finish_reason = json.dumps(calls), "tool_calls"
    else:
        reply = demo_reply(demo.messages, demo.seed)
        if demo.response_format is not None:
            reply = structured(demo.response_format, reply)
        message, finish_reason = {"role": "assistant", "content": reply}, "stop"
    prompt_tokens = sum(len(content_text(m.content).split()) for m in demo.messages)
    completion_tokens = len(reply.split())
    completion = {
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": demo.model,
        # `n` choices, all alike: the demo model is deterministic.
        "choices": [{"index": i, "message": message, "finish_reason": finish_reason} for i in range(max(demo.n, 1))],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens * max(demo.n, 1),
            "total_tokens": prompt_tokens + completion_tokens * max(demo.n, 1),
        },
    }
    if demo.stream:
        return StreamingResponse(_demo_events(completion), media_type="text/event-stream")
    return Response(msgspec.json.encode(completion), media_type="application/json")


async def _demo_events(completion: dict[str, Any]) -> AsyncIterator[bytes]:
    """The completion as OpenAI-style SSE: a role chunk, a chunk per word, the finish chunk, usage, [DONE]."""
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    head["model"] = completion["model"]
    for index, choice in enumerate(completion["choices"]):
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": word} for word in re.split(r"(?<=\s)", choice["message"]["content"] or "") if word]
        calls = choice["message"].get("tool_calls", [])
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)]
        for delta in deltas:
            yield _sse({**head, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        yield _sse({**head, "choices": [{"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    yield _sse({**head, "choices": [], "usage": completion["usage"]})
    yield b"data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def demo_model_app() -> Starlette:
    """The demo model as an OpenAI-compatible ASGI app serving `POST /demo/v1/chat/completions` (and
    `GET /demo/v1/models`, which `/health?deep=1` checks)."""
    return Starlette(
        routes=[
            Route(f"{DEMO_BASE_URL}/chat/completions", _chat_completions, methods=["POST"]),
            Route(f"{DEMO_BASE_URL}/models", _models, methods=["GET"]),
        ]
    )


async def _models(request: Request) -> Response:
    model = {"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "adapter-critic-demo"}
    return Response(msgspec.json.encode({"object": "list", "data": [model]}), media_type="application/json")
