"""The upstream client's side of a stage call: which credentials go upstream (the server's key, or the caller's own
token for a target that says `forward_client_authorization`), and an answer it cannot read is a 502."""

from __future__ import annotations

import json

import httpx
import pytest

from ..conftest import CLIENT_KEY, SERVER_KEY, UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import completion, envelope, forwarding_config, hostile, nested
from ..scripted_upstream import ScriptedUpstream

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("server_keys")]


# -- forwarding the caller's credentials -------------------------------------------------------------------------------


async def test_client_authorization_is_never_forwarded_by_default(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    caller = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with serve() as client:
        for model in ("m-direct", "m-adapter", "m-critic"):
            assert (await client.post("/chat/completions", json=chat(model), headers=caller)).status_code == 200
        streamed = await client.post("/chat/completions", json=chat("m-critic", stream=True), headers=caller)
    assert streamed.status_code == 200
    assert len(upstream.calls) == 9
    assert all(call.headers.get("authorization") == f"Bearer {SERVER_KEY}" for call in upstream.calls)


async def test_forwarding_target_gets_the_callers_token_and_never_the_servers_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRITIC_KEY", "sk-critic-key-123456")
    seen: list[tuple[str, str | None]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        if json.loads(request.content).get("stream"):
            events = b"".join(
                b"data: " + json.dumps(e).encode() + b"\n\n"
                for e in (
                    {"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                )
            )
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=events + b"data: [DONE]\n\n"
            )
        return httpx.Response(200, json=completion())

    async with hostile(forwarding_config(), handler) as client:
        caller = {"authorization": f"Bearer {CLIENT_KEY}"}
        assert (await client.post("/chat/completions", json=chat("m-forward"), headers=caller)).status_code == 200
        streamed = await client.post("/chat/completions", json=chat("m-forward", stream=True), headers=caller)
        assert streamed.status_code == 200 and "[DONE]" in streamed.text
        anonymous = await client.post("/chat/completions", json=chat("m-forward"))
        assert anonymous.status_code == 200
        # An override onto the forwarding target's URL forwards too; a configured plain target keeps its own key.
        over = {"api_base_url": UPSTREAM_URL, "api_model": "x"}
        assert (
            await client.post("/chat/completions", json=chat("m-plain", x_adapter_critic=over), headers=caller)
        ).status_code == 200
        assert (await client.post("/chat/completions", json=chat("m-plain"), headers=caller)).status_code == 200
    assert seen == [
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # api_draft
        ("critic.test", "Bearer sk-critic-key-123456"),  # critic: its own key, not the caller's
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # api_final
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # streamed: api_draft
        ("critic.test", "Bearer sk-critic-key-123456"),
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # streamed: api_final
        ("upstream.test", None),  # no caller token: nothing, and not the server's key
        ("critic.test", "Bearer sk-critic-key-123456"),
        ("upstream.test", None),
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # m-plain's api overridden onto the forwarding URL...
        ("upstream.test", f"Bearer {CLIENT_KEY}"),  # ...and its adapter, which falls back to that api target
        ("plain.test", f"Bearer {SERVER_KEY}"),  # m-plain as configured: the server's key
        ("plain.test", f"Bearer {SERVER_KEY}"),
    ]


# -- answers that are not a chat completion ----------------------------------------------------------------------------


async def test_deeply_nested_upstream_answer_is_a_502() -> None:
    deep = json.loads(nested(900))

    async def handler(request: httpx.Request) -> httpx.Response:
        text = json.dumps(completion(tool_calls=[deep]))
        text = text.replace(json.dumps(deep), nested(50_000))
        return httpx.Response(200, content=text.encode(), headers={"content-type": "application/json"})

    async with hostile(make_config(), handler) as client:
        error = envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)
    assert "did not answer with an OpenAI chat completion" in error["message"]


async def test_invalid_utf8_upstream_answer_is_a_502() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(completion("@@")).encode().replace(b"@@", b"\xff\xfe"))

    async with hostile(make_config(), handler) as client:
        envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)
