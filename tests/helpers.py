"""Builders the test files share instead of each keeping a copy: what an upstream answers (`completion`, `usage`,
`sse`), what a client reads (`envelope`, `extension`), deeply nested JSON (`nested`), an adapter's edit blocks
(`block`), configs (`target`, `forwarding_config`; as TOML files, `direct_toml` and `served_toml`), ASGI requests
made by hand (`post_scope`, `body_then`, `raw_post`), a request read off a raw socket (`read_request`), and the app
under test against a hand-written upstream (`hostile`).

`make_config`, the scripted upstream's config, stays in tests/conftest.py with the fixtures; this module holds none.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import anyio
import anyio.abc
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter_critic import Config, create_app

from .conftest import UPSTREAM_URL, asgi_client, make_config

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


# -- what an upstream answers -----------------------------------------------------------------------------------------


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def usage_totalling(total: int) -> dict[str, int]:
    """Usage of `total` tokens: one completion token, the rest prompt."""
    return usage(total - 1, 1)


def completion(
    content: str = "fine", *, model: str = "m", created: int = 1, tokens: dict[str, int] | None = None, **message: Any
) -> dict[str, Any]:
    """An OpenAI chat completion of one choice saying `content` (extra `message` fields, e.g. `tool_calls`, join
    the message); `tokens` is its usage, one prompt and one completion token unless given."""
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content, **message}, "finish_reason": "stop"}
        ],
        "usage": usage(1, 1) if tokens is None else tokens,
    }


def sse(*events: dict[str, Any]) -> httpx.Response:
    """An event-stream answer sending `events` as `data:` lines, then `data: [DONE]`."""
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return httpx.Response(200, content=data, headers={"content-type": "text/event-stream"})


def nested(depth: int, inner: str = "1") -> str:
    """JSON text of `inner` inside `depth` arrays."""
    return "[" * depth + inner + "]" * depth


def block(
    search: str,
    replace: str = "x",
    *,
    start: str = "<<<<<<< SEARCH",
    mid: str = "=======",
    end: str = ">>>>>>> REPLACE",
) -> str:
    """One SEARCH/REPLACE edit block, as an adapter writes it (the markers may be varied)."""
    return f"{start}\n{search}\n{mid}\n{replace}\n{end}\n"


# -- what a client reads ----------------------------------------------------------------------------------------------


def envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    """The `error` of an OpenAI error envelope answered with `status`, after checking it has exactly its four keys."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def extension(response: Any) -> dict[str, Any]:
    """The `adapter_critic` extension of an answer read with an official SDK (a field the SDK's types do not know)."""
    assert response.model_extra is not None
    ext: dict[str, Any] = response.model_extra["adapter_critic"]
    return ext


async def post(client: Any, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    """POST `body` to `/chat/completions`; the answer's JSON, after checking its status is `status`."""
    response = await client.post("/chat/completions", json=body)
    assert response.status_code == status, response.text
    data: dict[str, Any] = response.json()
    return data


def post_scope(path: str, raw: bytes) -> Scope:
    """The ASGI scope of a JSON POST of `raw` to `path`, as a server hands it to the app."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def body_then(raw: bytes, receive_after: Receive) -> Receive:
    """An ASGI `receive` handing the app the request body `raw`, whole, then what `receive_after` receives."""
    request_sent = False

    async def receive() -> Message:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive_after()

    return receive


async def raw_post(app: ASGIApp, body: dict[str, Any], receive_after: Receive, send: Send) -> None:
    """POST `body` to `/chat/completions` on `app` with our own receive/send; after the body, `receive` is
    `receive_after`."""
    raw = json.dumps(body).encode()
    with anyio.fail_after(5):  # a hang guard: the app must return
        await app(post_scope("/chat/completions", raw), body_then(raw, receive_after), send)


async def read_request(stream: anyio.abc.ByteStream) -> tuple[dict[str, str], bytes]:
    """One HTTP/1.1 request read off `stream` by a hand-written loopback upstream: its headers (names lower-cased)
    and its body (as long as its content-length says)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        body += await stream.receive()
    return headers, body


@contextlib.asynccontextmanager
async def hostile(config: Config, handler: Handler) -> AsyncIterator[httpx.AsyncClient]:
    """The app under test with its upstream calls answered by `handler` (an `httpx.MockTransport` handler), so a test
    can answer with an endless body, echo the request's headers back, or fail with a chosen exception text."""
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as network,
        asgi_client(create_app(config, http_client=network)) as client,
    ):
        yield client


# -- configs -----------------------------------------------------------------------------------------------------------


def target(model: str, base_url: str = UPSTREAM_URL, **extra: Any) -> dict[str, Any]:
    """A stage's target in a config: `model` at `base_url` (the scripted upstream unless given)."""
    return {"model": model, "base_url": base_url, **extra}


def forwarding_config(**api: Any) -> Config:
    """`m-forward`, a critic whose api target forwards the caller's own token (its critic has a key of its own), and
    `m-plain`, an adapter calling with the server's key."""
    return make_config(
        served_models={
            "m-forward": {
                "mode": "critic",
                "api": {"model": "api-model", "base_url": UPSTREAM_URL, "forward_client_authorization": True, **api},
                "critic": {"model": "critic-model", "base_url": "http://critic.test/v1", "api_key_env": "CRITIC_KEY"},
            },
            "m-plain": {"mode": "adapter", "api": {"model": "plain-model", "base_url": "http://plain.test/v1"}},
        }
    )


def direct_toml(base_url: str, *, name: str = "m", model: str = "x") -> str:
    """TOML for one served model `name` in direct mode, calling `model` at `base_url`."""
    return f'[served_models.{name}]\nmode = "direct"\napi = {{ model = "{model}", base_url = "{base_url}" }}\n'


def served_toml(base_url: str, prefix: str, modes: Iterable[str] = ("direct", "adapter", "critic")) -> str:
    """TOML for `make_config`'s served models, one per mode and named `<prefix>-<mode>`: every stage at `base_url`,
    calling the model `<stage>-model` (`api-model`, `adapter-model`, `critic-model`)."""
    tables = []
    for mode in modes:
        lines = [f"[served_models.{prefix}-{mode}]", f'mode = "{mode}"']
        for stage in ("api", mode) if mode != "direct" else ("api",):
            lines.append(f'{stage} = {{ model = "{stage}-model", base_url = "{base_url}" }}')
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)
