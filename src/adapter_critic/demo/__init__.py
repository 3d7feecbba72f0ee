"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The built-in demo: a small deterministic *demo model* (not a real LLM) and the config serving it.

The demo model honours the request options a client's code depends on, as a real model does, so tool calling,
structured output and limits can be tried offline:

- `tool_choice` (`none`, `auto`, `required`, a named function): it calls a tool when it must, or (`auto`) when the
  last user message names one, with arguments that fit the tool's parameters' schema (`demo.values`);
- `response_format` (`json_object`, `json_schema`): it answers JSON that fits the schema, with plausible values;
- `stop`: it stops before the first stop sequence it reaches, says which (vLLM's choice `stop_reason`);
- `max_tokens` / `max_completion_tokens`: it stops after that many tokens (its tokens are words), `length`.

`uvicorn adapter_critic.asgi:app` without `ADAPTER_CRITIC_CONFIG` serves `demo-direct`, `demo-adapter`,
`demo-critic`, `demo-advisor`, `demo-panel`, `demo-best-of-3`, `demo-self-consistency`, `demo-self-refine`,
`demo-re2`, `demo-mixture-of-agents` and `demo-chain-of-verification`, whose stages call the demo model in-process,
so every built-in workflow can be seen working with no API key and no network. Sampled with a seed, the demo model
works out a sum the user asks for (`What is 17 * 23?`) and slips on some seeds, so that self-consistency's vote can
be seen outvoting a wrong first sample.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..config import Config, ServedModel, Target
from ..config.models import ModelsConfig
from ..config.served import served_model
from ..errorwire import error_envelope
from ..workflows.prompts import (
    DEFAULT_ADAPTER_SYSTEM_PROMPT,
    DEFAULT_CRITIC_SYSTEM_PROMPT,
    SECOND_PASS_INSTRUCTION,
    content_text,
)
from ..workflows.verification import VERIFIED_LEAD
from .answers import (
    ADVISED_LEAD,
    PANEL_LEAD,
    REFINE_LEAD,
    REFINED_LEAD,
    REREAD_LEAD,
    advised,
    call_of,
    called,
    candidate_note,
    choice_problem,
    cut,
    cut_calls,
    drafted_calls,
    forced_name,
    functions,
    named_in,
    reread,
    stage_reply,
    structured,
    tokens,
    working,
)
from .lessons import endings, learnt, split_lessons
from .roles import LAYERS, role_reply, synthesis, verified_lead

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
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    seed: int | None = None
    n: int = 1


_request_decoder = msgspec.json.Decoder(_DemoRequest)


# An auto model over three techniques on the demo model (docs/guides/routing.md): sums pay for self-consistency,
# questions about a review for the critic, anything else is answered directly. Until `route fit` stores a policy, the
# first candidate answers; no exploration, so that the demo answers the same every time.
DEMO_AUTO = {
    "mode": "auto",
    "candidates": [f"direct-{DEMO_MODEL}", f"self_consistency-{DEMO_MODEL}", f"critic-{DEMO_MODEL}"],
    "classes": [{"name": "review", "pattern": r"(?i)\b(check|review|look)"}],
    "explore": 0.0,
}


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
            "demo-self-consistency": ServedModel(
                mode="self_consistency", api=target, settings={"n": 5, "seed": 1, "extract": "boxed"}
            ),
            "demo-self-refine": ServedModel(mode="self_refine", api=target),
            "demo-re2": ServedModel(mode="re2", api=target),
            "demo-mixture-of-agents": ServedModel(mode="mixture_of_agents", api=target, settings={"layers": LAYERS}),
            "demo-chain-of-verification": ServedModel(mode="chain_of_verification", api=target),
            "demo-auto": served_model(DEMO_AUTO, "the built-in demo", "served_models.demo-auto"),
        },
        # Every workflow by its prefix, and chains, over the demo model: `critic-demo`, `best_of_n&critic-demo`.
        models=ModelsConfig(technique_prefixes=True, upstream="demo-direct"),
    )


def demo_reply(messages: list[_DemoMessage], seed: int | None = None) -> str:
    """What the demo model says: it recognises the default reviewer prompts and plays each stage's part."""
    system = content_text(messages[0].content) if messages and messages[0].role == "system" else ""
    system, lessons = split_lessons(system)
    last = content_text(messages[-1].content) if messages else ""
    reply = learnt(system, last) or stage_reply(system, last) or role_reply(system, last)
    if reply is not None:
        return reply
    if system == DEFAULT_ADAPTER_SYSTEM_PROMPT:
        if DRAFT_LEAD in last:
            return f"<<<<<<< SEARCH\n{DRAFT_LEAD}\n=======\n{ADAPTER_EDIT}\n>>>>>>> REPLACE"
        return "lgtm"
    if system == DEFAULT_CRITIC_SYSTEM_PROMPT:
        return CRITIQUE + "".join(f"\n- {lesson}" for lesson in lessons)
    if _second_pass(messages):  # the whole answer again, revised (the draft may have been cut short)
        if last.startswith(VERIFIED_LEAD):
            lead = verified_lead(last)
        else:
            lead = PANEL_REVISED_LEAD if PANEL_LEAD[2:] in last else REVISED_LEAD
        return f'{lead}\nYou said: "{user_said(messages[:-2])[0]}"{candidate_note(seed)}{endings(last)}'
    if _second_pass(messages, REFINE_LEAD):  # self-refine: the question is the last user message not a refine's
        asked = [m for m in messages if m.role != "user" or not content_text(m.content).startswith(REFINE_LEAD)]
        return f'{REFINED_LEAD}\nYou said: "{user_said(asked)[0]}"{candidate_note(seed)}'
    said, was_advised = user_said(messages)
    synthesised = synthesis(system)
    if synthesised is not None:  # a mixture-of-agents layer or aggregator, shown the responses before it
        lead, note = synthesised
        return f'{lead}\nYou said: "{said}"{note}{candidate_note(seed)}'
    lead = ADVISED_LEAD if was_advised else REREAD_LEAD if _reread(messages) else DRAFT_LEAD
    worked = working(said, seed)
    shown = f"\n{worked}" if worked else ""
    return f'{lead}\nYou said: "{said}"{shown}{candidate_note(seed)}'


def user_said(messages: list[_DemoMessage]) -> tuple[str, bool]:
    """The last user message's own words (on one line, at most 200 characters, without a question re2 repeated),
    and whether an advisor's guidance was appended to it."""
    own, was_advised = advised(_last_user(messages))
    return " ".join(reread(own)[0].split())[:200], was_advised


def _last_user(messages: list[_DemoMessage]) -> str:
    return next((content_text(m.content) for m in reversed(messages) if m.role == "user"), "")


def _reread(messages: list[_DemoMessage]) -> bool:
    return reread(_last_user(messages))[1]


# How the last user message of a second pass begins: the critic's (and panel's), or chain-of-verification's.
_REVISIONS = (SECOND_PASS_LEAD, VERIFIED_LEAD)


def _second_pass(messages: list[_DemoMessage], lead: str | tuple[str, ...] = _REVISIONS) -> bool:
    """Whether the last message asks for the answer again, revised (the critic's second pass or
    chain-of-verification's final answer, or with `lead`)."""
    last = messages[-1] if messages else None
    return last is not None and last.role == "user" and content_text(last.content).startswith(lead)


def demo_tool_calls(demo: _DemoRequest, text: str) -> list[Any] | None:
    """The tool calls the demo model makes, as `tool_choice` has it: none for `none`; a call of the named function
    for a named one; for `required`, a call of the function the last user message names, else of the first; for
    `auto` (the default), a call only of a function the last user message names. In a second pass, the calls of
    the draft under revision (it still wants them) where `tool_choice` allows them. `text` is the reply the
    arguments' answer-like strings hold (`demo.values`)."""
    offered = functions(demo.tools)
    if not offered or demo.tool_choice == "none":
        return None
    messages = demo.messages
    forced = forced_name(demo.tool_choice)
    revising = _second_pass(messages, (*_REVISIONS, REFINE_LEAD))
    if revising and len(messages) >= 2:
        drafted = drafted_calls(content_text(messages[-2].content))
        if drafted and (forced is None or all(called(call) == forced for call in drafted)):
            return drafted
    last = content_text(messages[-1].content) if messages and messages[-1].role == "user" else ""
    function: dict[str, Any] | None
    if forced is not None:
        function = next((f for f in offered if f["name"] == forced), None)
    elif revising:
        function = offered[0] if demo.tool_choice == "required" else None
    else:
        function = named_in(offered, last) or (offered[0] if demo.tool_choice == "required" else None)
    return [call_of(function, text, user_said(messages)[0])] if function is not None else None


def demo_choice(demo: _DemoRequest) -> tuple[dict[str, Any], str, str | None, int]:
    """The demo model's message for a request, its finish reason, the stop sequence that ended it (if one did)
    and how many tokens it took. Tool calls are not cut at a stop sequence (their arguments are cut at
    `max_tokens`); text, JSON included, is cut at both."""
    limits = [n for n in (demo.max_tokens, demo.max_completion_tokens) if n is not None]
    limit = min(limits) if limits else None
    stop = [demo.stop] if isinstance(demo.stop, str) else demo.stop or []
    text = demo_reply(demo.messages, demo.seed)
    calls = demo_tool_calls(demo, text)
    if calls:
        kept, finish = cut_calls(calls, limit)
        used = sum(len(tokens(call["function"]["arguments"])) for call in kept)
        return {"role": "assistant", "content": None, "tool_calls": kept}, finish, None, used
    if demo.response_format is not None:
        text = structured(demo.response_format, text, user_said(demo.messages)[0])
    text, finish, sequence = cut(text, stop, limit)
    return {"role": "assistant", "content": text}, finish, sequence, len(tokens(text))


async def _chat_completions(request: Request) -> Response:
    try:
        demo = _request_decoder.decode(await request.body())
    except msgspec.DecodeError as exc:
        return _refused(f"demo model: {exc}")
    problem = choice_problem(demo.tool_choice, functions(demo.tools))
    if problem is not None:
        return _refused(f"demo model: {problem}", "tool_choice")
    message, finish_reason, stop_sequence, completion_tokens = demo_choice(demo)
    choice: dict[str, Any] = {"message": message, "finish_reason": finish_reason}
    if stop_sequence is not None:  # which stop sequence ended the answer, as vLLM says it
        choice["stop_reason"] = stop_sequence
    prompt_tokens = sum(len(content_text(m.content).split()) for m in demo.messages)
    completion = {
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": demo.model,
        # `n` choices, all alike: the demo model is deterministic.
        "choices": [{"index": i, **choice} for i in range(max(demo.n, 1))],
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
    """The completion as OpenAI-style SSE: a role chunk, a chunk per token, the finish chunk, usage, [DONE]."""
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    head["model"] = completion["model"]
    for choice in completion["choices"]:
        index, message = choice["index"], choice["message"]
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": token} for token in tokens(message["content"] or "")]
        calls = message.get("tool_calls", [])
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)]
        for delta in deltas:
            yield _sse({**head, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        finish = {key: value for key, value in choice.items() if key != "message"}
        yield _sse({**head, "choices": [{**finish, "delta": {}}]})
    yield _sse({**head, "choices": [], "usage": completion["usage"]})
    yield b"data: [DONE]\n\n"


def _refused(message: str, param: str | None = None) -> Response:
    error = error_envelope(message, "invalid_request_error", param=param)
    return Response(msgspec.json.encode(error), status_code=400, media_type="application/json")


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def demo_model_for(config: Config) -> Starlette | None:
    """The demo model's app when a target of `config` names it (`base_url = "/demo/v1"`, as the config `tune` writes
    over the demo does), so that a config file may use the demo model; else None."""
    if any(target.base_url.rstrip("/") == DEMO_BASE_URL for target in config.targets()):
        return demo_model_app()
    return None


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
