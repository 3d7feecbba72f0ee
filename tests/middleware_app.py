"""A fake local model server wrapped in `AdapterCriticMiddleware`, for the middleware tests.

`LocalModel` stands for a model server written in Python: it serves `POST /v1/chat/completions`
itself and records every request it sees, raw body bytes included. Its answers depend on the model
asked for, so a pipeline run is recognisable from its output:

- `reviewer` answers with one SEARCH/REPLACE block turning `draft` into `reviewed`;
- any other model answers `draft from <model>: <last user text>`.

It also counts tokens: vLLM's `POST /tokenize` (10 a message) and its own Anthropic `POST /v1/messages/count_tokens`
(always 42).

`app` (the module attribute) is the middleware around a `LocalModel`, served by
`uvicorn tests.middleware_app:app` in the end-to-end test; `GET /_calls` reports what the local
model saw.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapter_critic import AdapterCriticMiddleware, Config

EDIT = "<<<<<<< SEARCH\ndraft\n=======\nreviewed\n>>>>>>> REPLACE"


@dataclass
class Seen:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]

    @property
    def model(self) -> str | None:
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        return data.get("model") if isinstance(data, dict) else None


@dataclass
class LocalModel:
    """The wrapped app: a tiny OpenAI-compatible model server that records what reaches it."""

    seen: list[Seen] = field(default_factory=list)
    started: bool = False
    stopped: bool = False

    def __post_init__(self) -> None:
        self.app: Starlette = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST", "GET"]),
                Route("/v1/embeddings", self._other, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/_calls", self._calls, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.started = True
        yield
        self.stopped = True

    async def _record(self, request: Request) -> Seen:
        seen = Seen(request.method, request.url.path, await request.body(), dict(request.headers))
        self.seen.append(seen)
        return seen

    async def _chat(self, request: Request) -> Response:
        seen = await self._record(request)
        if request.method == "GET":
            return JSONResponse({"local": "GET"})
        try:
            body = json.loads(seen.body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            error = {"message": "local model: the body is not a JSON object", "type": "invalid_request_error"}
            return JSONResponse({"error": error}, status_code=400)
        model = str(body.get("model"))
        if model == "reviewer":
            content = EDIT
        else:
            user = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
            content = f"draft from {model}: {user[-1] if user else ''}"
        return JSONResponse(
            {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": 1700000000,
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            }
        )

    async def _other(self, request: Request) -> Response:
        seen = await self._record(request)
        return JSONResponse({"local": seen.path, "size": len(seen.body)})

    async def _count_tokens(self, request: Request) -> Response:
        """The wrapped app's own Anthropic count (of models it serves itself): always 42."""
        await self._record(request)
        return JSONResponse({"input_tokens": 42})

    async def _tokenize(self, request: Request) -> Response:
        """vLLM's `/tokenize` of a chat: 10 tokens a message."""
        seen = await self._record(request)
        return JSONResponse({"count": 10 * len(json.loads(seen.body).get("messages", [])), "max_model_len": 4096})

    async def _calls(self, request: Request) -> Response:
        calls = [{"method": s.method, "path": s.path, "model": s.model} for s in self.seen]
        return JSONResponse(calls)


def local_config(**overrides: Any) -> Config:
    """Served models whose stages all run in-process on the wrapped app (`base_url = "/v1"`)."""
    data: dict[str, Any] = {
        "served_models": {
            "local-adapter": {
                "mode": "adapter",
                "api": {"model": "base", "base_url": "/v1"},
                "adapter": {"model": "reviewer", "base_url": "/v1"},
            },
        }
    }
    data.update(overrides)
    return Config.from_dict(data)


local_model = LocalModel()
app = AdapterCriticMiddleware(local_model.app, config=local_config())
