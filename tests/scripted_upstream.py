"""A scripted OpenAI-compatible upstream for tests: replies are queued by the test, every call is recorded.

In-process, tests hand `ScriptedUpstream().app` to `httpx.ASGITransport`. As a real server
(`python -m tests.scripted_upstream --fd N`), tests script it and read its calls over HTTP:
`POST /_script` (a JSON list of replies), `GET /_calls`, `POST /_reset`, `GET /_aborted` (the calls whose
slow reply or stream was cancelled or closed before it finished, or whose caller disconnected during the
reply's `delay`: the client went away), `GET /_holding` (how many calls their reply's `delay` holds now),
`POST /_resume` (let go the streams their reply's `stream_pause_after` holds, and the calls a reply with
`until_resumed` holds).

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

from . import scripted_anthropic


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
    until_resumed: bool = False  # with `delay`: the hold also ends when the test resumes the upstream (`POST /_resume`)
    model: str | None = None  # only answer calls for this model (None: any)
    match: str | None = None  # only answer calls whose messages' text contains this (None: any)
    # Hold the call until `gather` calls scripted with the same `group` are all being held, then answer them all:
    # proof that they overlapped in time. A group not complete within 10 s answers 500 (the test fails, not hangs).
    gather: int = 0
    group: str = ""
    echo: bool = False  # answer the unscripted default's text (`echo <model>: <last user text>`), not `content`
    keep: bool = False  # stay scripted after answering: this reply answers every matching call from now on
    # Streaming (`"stream": true` calls) only:
    first_chunk_delay: float = 0.0  # seconds between the response headers and the first event
    chunk_delay: float = 0.0  # seconds before each later event
    stream_break_after: int | None = None  # end the body after this many events: no more chunks, no [DONE]
    stream_drop: bool = False  # with stream_break_after: drop the connection instead (the app raises)
    stream_error: dict[str, Any] | None = None  # an `{"error": ...}` event at the break (else before the finish chunk)
    stream_no_done: bool = False  # every chunk, but no `data: [DONE]`
    # Send this many events, then hold the rest until the test resumes the upstream (`resume`, `POST /_resume`; up to
    # 10 s): what the app does with the first ones cannot depend on how the events happened to be split into reads.
    stream_pause_after: int | None = None
    # Where usage sits in the stream, as real servers put it: "openai" (a last chunk with `choices: []`),
    # "litellm" (LiteLLM's proxy: a last chunk whose `choices` keeps `[{"index": 0, "delta": {}}]`),
    # "every_chunk" (the running usage repeated on every chunk, the last one the total).
    stream_usage: str = "openai"
    # Fields real servers add: top-level (`system_fingerprint`, llama.cpp's `timings`), on the choice (`logprobs`,
    # `stop_reason`) and on the message (`reasoning_content`, `refusal`, `annotations`). Streamed: top-level ones on
    # every chunk, choice ones on the content chunks, message ones in a delta of their own before the content.
    extra: dict[str, Any] = field(default_factory=dict)
    choice_extra: dict[str, Any] = field(default_factory=dict)
    message_extra: dict[str, Any] = field(default_factory=dict)
    # Anthropic Messages calls (`…/messages`, see `tests.scripted_anthropic`) only: the answer's usage.
    anthropic_usage: dict[str, int] | None = None


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
        self.aborted: list[Call] = []  # calls whose slow reply or stream was cancelled/closed before it finished
        self._aborted_event: anyio.Event | None = None
        self._holding_event: anyio.Event | None = None
        self._groups: dict[str, tuple[list[Call], anyio.Event]] = {}
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat calls this upstream had in flight at once
        self.holding = 0  # calls being held by their reply's `delay` now
        self._holding_changed: anyio.Event | None = None
        self._resumed: anyio.Event | None = None
        self.app = Starlette(
            routes=[
                Route("/{prefix:path}/chat/completions", self._chat, methods=["POST"]),
                Route("/chat/completions", self._chat, methods=["POST"]),
                Route("/{prefix:path}/messages", self._messages, methods=["POST"]),
                Route("/{prefix:path}/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/vllm/tokenize", self._vllm_tokenize, methods=["POST"]),
                Route("/llamacpp/tokenize", self._llamacpp_tokenize, methods=["POST"]),
                Route("/llamacpppy/extras/tokenize", self._extras_tokenize, methods=["POST"]),
                Route("/tokenize", self._no_tokenize, methods=["POST"]),
                Route("/{prefix:path}/embeddings", self._embeddings, methods=["POST"]),
                Route("/{prefix:path}/completions", self._completions, methods=["POST"]),
                Route("/{prefix:path}/responses", self._responses, methods=["POST"]),
                Route("/{prefix:path}/models", self._models, methods=["GET"]),
                Route("/{prefix:path}/models/{model}", self._models, methods=["GET"]),
                Route("/_script", self._script, methods=["POST"]),
                Route("/_calls", self._calls, methods=["GET"]),
                Route("/_reset", self._reset, methods=["POST"]),
                Route("/_aborted", self._aborted, methods=["GET"]),
                Route("/_holding", self._holding, methods=["GET"]),
                Route("/_resume", self._resume, methods=["POST"]),
            ]
        )

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def reset(self) -> None:
        self.calls.clear()
        self.replies.clear()
        self.aborted.clear()
        self._aborted_event = None
        self._holding_event = None
        self._groups.clear()
        self._resumed = None
        self.in_flight = self.max_in_flight = 0

    def resume(self) -> None:
        """Let go the streams paused by their reply's `stream_pause_after` (and any that pause later)."""
        self._resumed = self._resumed or anyio.Event()
        self._resumed.set()

    async def _paused(self) -> None:
        self._resumed = self._resumed or anyio.Event()
        with anyio.move_on_after(10):  # a test that never resumes fails on what it reads, not by hanging
            await self._resumed.wait()

    def aborted_signal(self) -> anyio.Event:
        """An event set once a call was aborted (create it inside the event loop, e.g. in the test)."""
        if self._aborted_event is None:
            self._aborted_event = anyio.Event()
            if self.aborted:
                self._aborted_event.set()
        return self._aborted_event

    def holding_signal(self) -> anyio.Event:
        """An event set once a call is being held by its reply's `delay` (create it inside the event loop)."""
        if self._holding_event is None:
            self._holding_event = anyio.Event()
        return self._holding_event

    async def until_holding(self, count: int) -> None:
        """Wait until `count` calls are being held by their reply's `delay` at once (wrap it in a timeout)."""
        await self._until(lambda: self.holding >= count)

    async def until_aborted(self, count: int) -> None:
        """Wait until `count` calls were aborted (wrap it in a timeout)."""
        await self._until(lambda: len(self.aborted) >= count)

    async def _until(self, done: Any) -> None:
        while not done():
            if self._holding_changed is None:
                self._holding_changed = anyio.Event()
            await self._holding_changed.wait()

    def _changed(self) -> None:
        if self._holding_changed is not None:
            self._holding_changed.set()
            self._holding_changed = None

    def _abort(self, call: Call) -> None:
        self.aborted.append(call)
        self._changed()
        if self._aborted_event is not None:
            self._aborted_event.set()

    def _next(self, model: str, text: str) -> Reply | None:
        for reply in self.replies:
            if (reply.model is None or reply.model == model) and (reply.match is None or reply.match in text):
                if not reply.keep:
                    self.replies.remove(reply)
                return reply
        return None

    async def _chat(self, request: Request) -> Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _gather(self, call: Call, reply: Reply) -> bool:
        """Hold `call` until its group is complete; False if that took longer than 10 s."""
        members, complete = self._groups.setdefault(reply.group, ([], anyio.Event()))
        members.append(call)
        if len(members) >= reply.gather:
            complete.set()
        with anyio.move_on_after(10):
            await complete.wait()
            return True
        return False

    async def _answer(self, request: Request) -> Response:
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
        reply = self._next(model, _text(body)) or Reply(content=f"echo {model}: {_last_user_text(body)}")
        if reply.gather and not await self._gather(call, reply):
            return JSONResponse({"error": {"message": f"group {reply.group!r} never gathered"}}, status_code=500)
        if reply.delay and not await self._hold(request, call, reply.delay, reply.until_resumed):
            return Response(status_code=499)  # nobody is left to read it
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        content = f"echo {model}: {_last_user_text(body)}" if reply.echo else reply.content
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls is not None:
            message["tool_calls"] = reply.tool_calls
        message.update(reply.message_extra)
        completion: dict[str, Any] = {
            "id": "chatcmpl-upstream",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, **reply.choice_extra}],
            **reply.extra,
        }
        if reply.usage is not None:
            completion["usage"] = reply.usage
        if body.get("stream"):
            events = _sse(completion, reply, lambda: self._abort(call), self._paused)
            return StreamingResponse(events, media_type="text/event-stream", headers=reply.headers)
        return JSONResponse(completion, status_code=reply.status, headers=reply.headers)

    async def _messages(self, request: Request) -> Response:
        """Anthropic Messages: the same script, answered in the Messages shape (`tests.scripted_anthropic`)."""
        body = await self._record(request)
        model = str(body.get("model"))
        text = "\n".join(filter(None, [str(body.get("system") or ""), _text(body)]))  # a Messages body's system too
        reply = self._next(model, text) or Reply(content=f"echo {model}: {_last_user_text(body)}")
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        answer = scripted_anthropic.message(reply, model)
        if body.get("stream"):
            events = scripted_anthropic.events(answer, error=reply.stream_error)
            return StreamingResponse(events, media_type="text/event-stream", headers=reply.headers)
        return JSONResponse(answer, status_code=reply.status, headers=reply.headers)

    # -- other OpenAI endpoints, for the passthrough: fixed answers, every call recorded --------------------------
    async def _record(self, request: Request) -> dict[str, Any]:
        body = json.loads(await request.body() or b"{}")
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.calls.append(
            Call(request.method, str(request.url), request.url.path, headers.get("host", ""), headers, body)
        )
        return dict(body)

    # -- token counting: Anthropic's count_tokens, and /tokenize as vLLM and llama.cpp serve it ------------------
    # Counts are made up but deterministic, and differ per kind, so a test can tell which one counted.
    async def _count_tokens(self, request: Request) -> Response:
        """Anthropic's `/messages/count_tokens`: 100 + 1 per message; under a `/broken/` prefix, a 500."""
        body = await self._record(request)
        if request.url.path.startswith("/broken/"):
            return JSONResponse({"type": "error", "error": {"type": "api_error", "message": "down"}}, status_code=500)
        return JSONResponse({"input_tokens": 100 + len(body.get("messages") or [])})

    async def _vllm_tokenize(self, request: Request) -> Response:
        """vLLM's `/tokenize` of a chat: 200 + 1 per message; a body without `messages` or `prompt` is a 400."""
        body = await self._record(request)
        if "messages" not in body and "prompt" not in body:
            return JSONResponse({"object": "error", "message": "Field required", "code": 400}, status_code=400)
        count = 200 + len(body.get("messages") or [])
        return JSONResponse({"count": count, "max_model_len": 8192, "tokens": list(range(count))})

    async def _llamacpp_tokenize(self, request: Request) -> Response:
        """llama.cpp's `/tokenize`: one token per word of `content`; no `content` tokenizes nothing."""
        body = await self._record(request)
        return JSONResponse({"tokens": list(range(len(str(body.get("content", "")).split())))})

    async def _extras_tokenize(self, request: Request) -> Response:
        """llama-cpp-python's `/extras/tokenize` (it has no `/tokenize`): two tokens per word of `input`."""
        body = await self._record(request)
        return JSONResponse({"tokens": list(range(2 * len(str(body.get("input", "")).split())))})

    async def _no_tokenize(self, request: Request) -> Response:
        """An OpenAI-only server's `/tokenize`: recorded, and not found."""
        await self._record(request)
        return JSONResponse({"error": {"message": "Not found", "type": "invalid_request_error"}}, status_code=404)

    async def _embeddings(self, request: Request) -> Response:
        body = await self._record(request)
        inputs = body.get("input") if isinstance(body.get("input"), list) else [body.get("input")]
        data = [{"object": "embedding", "index": i, "embedding": [0.5, float(i)]} for i in range(len(inputs))]
        usage = {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}
        answer = {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        return JSONResponse(answer, headers={"x-upstream": "embeddings"})

    async def _responses(self, request: Request) -> Response:
        """The Responses endpoint, for the passthrough: a fixed answer naming the model."""
        body = await self._record(request)
        return JSONResponse({"id": "resp_upstream", "object": "response", "model": body.get("model"), "output": []})

    async def _completions(self, request: Request) -> Response:
        """The legacy completions endpoint: the prompt echoed word by word (streamed when asked)."""
        body = await self._record(request)
        words = str(body.get("prompt", "")).split()
        base = {"id": "cmpl-upstream", "object": "text_completion", "created": 1700000000, "model": body.get("model")}
        if not body.get("stream"):
            choice = {"index": 0, "text": " ".join(words), "finish_reason": "stop", "logprobs": None}
            return JSONResponse({**base, "choices": [choice]})

        async def events() -> Any:
            for word in words:
                choice = {"index": 0, "text": word + " ", "finish_reason": None, "logprobs": None}
                yield _event({**base, "choices": [choice]})
            yield _event({**base, "choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}]})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        model = {"id": "upstream-model", "object": "model", "created": 1, "owned_by": "upstream"}
        if request.url.path.endswith("/models/upstream-model"):
            return JSONResponse(model)
        return JSONResponse({"object": "list", "data": [model]})

    async def _hold(self, request: Request, call: Call, seconds: float, until_resumed: bool = False) -> bool:
        """Wait `seconds` before answering; False if the caller went away first (the call is aborted then, as
        when the wait is cancelled). Over the network a plain handler is not cancelled when its client leaves,
        so the wait also ends on `http.disconnect`."""
        held = False
        async with anyio.create_task_group() as tg:

            async def until_gone() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_gone)
            if self._holding_event is not None:
                self._holding_event.set()
            self.holding += 1
            self._changed()
            try:
                if until_resumed:
                    self._resumed = self._resumed or anyio.Event()
                    with anyio.move_on_after(seconds):
                        await self._resumed.wait()
                else:
                    await anyio.sleep(seconds)
                held = True
            finally:
                self.holding -= 1
                if not held:
                    self._abort(call)
            tg.cancel_scope.cancel()
        return held

    async def _script(self, request: Request) -> Response:
        self.script(*(Reply(**item) for item in json.loads(await request.body())))
        return JSONResponse({"queued": len(self.replies)})

    async def _calls(self, request: Request) -> Response:
        return JSONResponse([asdict(call) for call in self.calls])

    async def _reset(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"ok": True})

    async def _holding(self, request: Request) -> Response:
        """How many calls are being held by their reply's `delay`; with `?count=N&wait=S`, first wait up to S seconds
        for N of them (a long poll)."""
        count = int(request.query_params.get("count", "0"))
        with anyio.move_on_after(float(request.query_params.get("wait", "0"))):
            await self.until_holding(count)
        return JSONResponse({"holding": self.holding})

    async def _resume(self, request: Request) -> Response:
        self.resume()
        return JSONResponse({"ok": True})

    async def _aborted(self, request: Request) -> Response:
        """The aborted calls; with `?wait=S`, first wait up to S seconds for one (or for `?count=N` of them): a long
        poll, not a sleep loop."""
        wait = float(request.query_params.get("wait", "0"))
        if wait > 0:
            with anyio.move_on_after(wait):
                await self.until_aborted(int(request.query_params.get("count", "1")))
        return JSONResponse([asdict(call) for call in self.aborted])


def _text(body: dict[str, Any]) -> str:
    """Every message's text, one after another (what `Reply.match` looks in)."""
    texts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]
    return "\n".join(texts)


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), list):
            texts = [b.get("text") for b in message["content"] if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return str(texts[-1])  # an Anthropic turn: its last text block
    return ""


class _Dropped(Exception):
    """Raised by a stream scripted to drop its connection: a real server then aborts the response."""


async def _sse(completion: dict[str, Any], reply: Reply | None = None, on_abort: Any = None, paused: Any = None):  # type: ignore[no-untyped-def]
    reply = reply or Reply()
    base = {k: completion[k] for k in ("id", "created", "model")}
    base.update(reply.extra)
    choice = completion["choices"][0]
    text = choice["message"].get("content") or ""
    pieces = [text[i : i + 8] for i in range(0, len(text), 8)] or [""]
    events = [
        _event({**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    ]
    if reply.message_extra:
        delta = {"index": 0, "delta": dict(reply.message_extra), "finish_reason": None}
        events.append(_event({**base, "object": "chat.completion.chunk", "choices": [delta]}))
    for piece in pieces:
        delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None, **reply.choice_extra}
        events.append(_event({**base, "object": "chat.completion.chunk", "choices": [delta]}))
    for i, call in enumerate(choice["message"].get("tool_calls") or []):  # OpenAI's delta format, with `index`
        delta = {"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}, "finish_reason": None}
        events.append(_event({**base, "object": "chat.completion.chunk", "choices": [delta]}))
    if reply.stream_error is not None and reply.stream_break_after is None:
        events.append(_event({"error": reply.stream_error}))
    final = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    events.append(_event({**base, "object": "chat.completion.chunk", "choices": [final]}))
    usage = completion.get("usage")
    if usage is not None and reply.stream_usage == "every_chunk":
        events = [_with_usage(event, usage) for event in events]
    elif usage is not None:
        choices = [{"index": 0, "delta": {}}] if reply.stream_usage == "litellm" else []
        events.append(_event({**base, "object": "chat.completion.chunk", "choices": choices, "usage": usage}))
    if reply.stream_break_after is not None:
        events = events[: reply.stream_break_after]
        if reply.stream_error is not None:
            events.append(_event({"error": reply.stream_error}))
    if not reply.stream_no_done and (reply.stream_break_after is None or reply.stream_error is not None):
        events.append("data: [DONE]\n\n")
    finished = False
    try:
        for i, item in enumerate(events):
            delay = reply.first_chunk_delay if i == 0 else reply.chunk_delay
            if delay:
                await anyio.sleep(delay)
            if i == reply.stream_pause_after and paused is not None:
                await paused()
            yield item
        if reply.stream_drop:
            raise _Dropped("scripted connection drop")
        finished = True
    finally:
        if not finished and on_abort is not None and not reply.stream_drop:
            on_abort()  # cancelled or closed before the last event: the client went away


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _with_usage(event: str, usage: dict[str, int]) -> str:
    """`event` carrying `usage`, or the running share of it for an event before the last (`every_chunk`)."""
    data = json.loads(event[len("data: ") :])
    if "choices" not in data:
        return event
    finish = data["choices"] and data["choices"][0].get("finish_reason") is not None
    data["usage"] = usage if finish else {**usage, "completion_tokens": 0, "total_tokens": usage["prompt_tokens"]}
    return _event(data)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="an already listening socket to serve on")
    args = parser.parse_args()
    uvicorn.run(ScriptedUpstream().app, fd=args.fd, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
