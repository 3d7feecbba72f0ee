"""A scripted OpenAI-compatible upstream for tests: replies are queued by the test, every call is recorded.

In-process, tests hand `ScriptedUpstream().app` to `httpx.ASGITransport`. As a real server
(`python tests/scripted_upstream.py --fd N`), tests script it and read its calls over HTTP:
`POST /_script` (a JSON list of replies), `GET /_calls`, `POST /_reset`.

A reply with no script answers `echo <model>: <last user text>` with usage 1/2/3.
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    """One scripted answer. `body` (raw bytes as text) replaces the generated completion when given."""

    content: str | None = "ok"
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = "stop"
    usage: dict[str, int] | None = field(
        default_factory=lambda: {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    )
    status: int = 200
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    model: str | None = None  # only answer calls for this model (None: any)


@dataclass
class Call:
    method: str
    url: str
    path: str
    host: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.body.get("model"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


class ScriptedUpstream:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.replies: deque[Reply] = deque()
        self.app = Starlette(
            routes=[
                Route("/{prefix:path}/chat/completions", self._chat, methods=["POST"]),
                Route("/chat/completions", self._chat, methods=["POST"]),
                Route("/_script", self._script, methods=["POST"]),
                Route("/_calls", self._calls, methods=["GET"]),
                Route("/_reset", self._reset, methods=["POST"]),
            ]
        )

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def reset(self) -> None:
        self.calls.clear()
        self.replies.clear()

    def _next(self, model: str) -> Reply | None:
        for reply in self.replies:
            if reply.model is None or reply.model == model:
                self.replies.remove(reply)
                return reply
        return None

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        call = Call(
            method=request.method,
            url=str(request.url),
            path=request.url.path,
            host=request.headers.get("host", ""),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        self.calls.append(call)
        model = str(body.get("model"))
        reply = self._next(model) or Reply(content=f"echo {model}: {_last_user_text(body)}")
        if reply.delay:
            await anyio.sleep(reply.delay)
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls is not None:
            message["tool_calls"] = reply.tool_calls
        completion: dict[str, Any] = {
            "id": "chatcmpl-upstream",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        }
        if reply.usage is not None:
            completion["usage"] = reply.usage
        if body.get("stream"):
            return StreamingResponse(_sse(completion), media_type="text/event-stream", headers=reply.headers)
        return JSONResponse(completion, status_code=reply.status, headers=reply.headers)

    async def _script(self, request: Request) -> Response:
        self.script(*(Reply(**item) for item in json.loads(await request.body())))
        return JSONResponse({"queued": len(self.replies)})

    async def _calls(self, request: Request) -> Response:
        return JSONResponse([asdict(call) for call in self.calls])

    async def _reset(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"ok": True})


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


async def _sse(completion: dict[str, Any]):  # type: ignore[no-untyped-def]
    base = {k: completion[k] for k in ("id", "created", "model")}
    choice = completion["choices"][0]
    text = choice["message"].get("content") or ""
    pieces = [text[i : i + 8] for i in range(0, len(text), 8)] or [""]
    yield _event({**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for piece in pieces:
        delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
        yield _event({**base, "object": "chat.completion.chunk", "choices": [delta]})
    final = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    yield _event({**base, "object": "chat.completion.chunk", "choices": [final]})
    if "usage" in completion:
        yield _event({**base, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]})
    yield "data: [DONE]\n\n"


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="an already listening socket to serve on")
    args = parser.parse_args()
    uvicorn.run(ScriptedUpstream().app, fd=args.fd, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
