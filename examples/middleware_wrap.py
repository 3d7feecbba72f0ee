"""A small model server wrapped in `AdapterCriticMiddleware`: the pipeline runs in the same process.

The wrapped app stands for a model server written in Python. It serves `POST /v1/chat/completions`
itself, for three toy models (no real LLM involved):

- `echo` answers `Echo: <the first user message>`;
- `proofreader` plays the adapter: one SEARCH/REPLACE block turning `Echo:` into `Echo (proofread):`;
- `toy-critic` plays the critic: a one-line critique.

The middleware adds the served models `toy-direct`, `toy-adapter` and `toy-critic-loop`. Their stage
targets have `base_url = "/v1"`, a path, so each stage is called in-process on the wrapped app with no
network hop. Requests for any other model (`echo` itself) and every other path reach the wrapped app
untouched.

Run it from the repository root::

    uvicorn middleware_wrap:app --app-dir examples --port 9000
    curl -s localhost:9000/v1/chat/completions -H 'content-type: application/json' \\
      -d '{"model": "toy-adapter", "messages": [{"role": "user", "content": "hi"}]}'
"""

from __future__ import annotations

import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adapter_critic import AdapterCriticMiddleware, Config

PROOFREAD = "<<<<<<< SEARCH\nEcho:\n=======\nEcho (proofread):\n>>>>>>> REPLACE"
CRITIQUE = "- Fine as it is; an echo needs no changes."


def toy_reply(model: str, messages: list[dict[str, Any]]) -> str:
    if model == "proofreader":
        return PROOFREAD
    if model == "toy-critic":
        return CRITIQUE
    first_user = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    return f"Echo: {first_user}"


async def chat_completions(request: Request) -> JSONResponse:
    body = await request.json()
    model = str(body.get("model", "echo"))
    content = toy_reply(model, body.get("messages", []))
    words = len(content.split())
    return JSONResponse(
        {
            "id": "chatcmpl-toy",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": words, "total_tokens": 1 + words},
        }
    )


model_server = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"])])

config = Config.from_dict(
    {
        "served_models": {
            "toy-direct": {"mode": "direct", "api": {"model": "echo", "base_url": "/v1"}},
            "toy-adapter": {
                "mode": "adapter",
                "api": {"model": "echo", "base_url": "/v1"},
                "adapter": {"model": "proofreader", "base_url": "/v1"},
            },
            "toy-critic-loop": {
                "mode": "critic",
                "api": {"model": "echo", "base_url": "/v1"},
                "critic": {"model": "toy-critic", "base_url": "/v1"},
            },
        }
    },
    source="examples/middleware_wrap.py",
)

app = AdapterCriticMiddleware(model_server, config=config)
