"""Targets with `protocol = "anthropic"`, in-process against the scripted upstream's Messages endpoint: as the
critic of a critic run (plain and streamed), as the API stage of every workflow (the streamed final call
included), its errors mapped to §7, and in deep health."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapter_critic import Config, create_app
from adapter_critic.workflows.prompts import DEFAULT_CRITIC_SYSTEM_PROMPT

from ..conftest import UPSTREAM_URL, asgi_client, chat
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

CLAUDE_URL = "http://claude.test/v1"
KEY = "sk-ant-test-key"
CLAUDE = {"model": "claude-sonnet-4-5", "base_url": CLAUDE_URL, "protocol": "anthropic", "api_key_env": "CLAUDE_KEY"}
LOCAL = {"model": "local-model", "base_url": UPSTREAM_URL}


def config(**top: Any) -> Config:
    return Config.from_dict(
        {
            "retries": 0,
            "served_models": {
                "m-critic": {"mode": "critic", "api": LOCAL, "critic": CLAUDE},
                "m-adapter": {"mode": "adapter", "api": LOCAL, "adapter": CLAUDE},
                "m-claude": {"mode": "direct", "api": CLAUDE},
                "m-claude-critic": {"mode": "critic", "api": CLAUDE},
            },
            **top,
        }
    )


@pytest.fixture(autouse=True)
def claude_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@contextlib.asynccontextmanager
async def serving(upstream: ScriptedUpstream, cfg: Config | None = None) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client,
        asgi_client(create_app(cfg or config(), http_client=upstream_client)) as client,
    ):
        yield client


def claude_calls(upstream: ScriptedUpstream) -> list[Any]:
    return [call for call in upstream.calls if call.path.endswith("/messages")]


def sse_chunks(text: str) -> list[dict[str, Any]]:
    lines = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


async def test_a_claude_critic_reviews_the_local_draft(upstream: ScriptedUpstream) -> None:
    usage = {"input_tokens": 30, "cache_read_input_tokens": 70, "output_tokens": 6}
    upstream.script(
        Reply(content="Paris.", model="local-model"),
        Reply(content="Say which country.", model="claude-sonnet-4-5", anthropic_usage=usage),
        Reply(content="Paris, France.", model="local-model"),
    )
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-critic", "Where is the Eiffel Tower?"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Paris, France."
    ext = body["adapter_critic"]
    assert ext["intermediate"]["critic"] == "Say which country."
    assert ext["tokens"]["stages"]["critic"] == {
        "prompt_tokens": 100,
        "completion_tokens": 6,
        "total_tokens": 106,
        "prompt_tokens_details": {"cached_tokens": 70},
    }
    [call] = claude_calls(upstream)
    assert call.path == "/v1/messages"
    assert call.headers["x-api-key"] == KEY
    assert call.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in call.headers
    assert call.body["model"] == "claude-sonnet-4-5"
    assert call.body["max_tokens"] == 4096  # the default: neither the request nor the target said
    assert call.body["system"] == DEFAULT_CRITIC_SYSTEM_PROMPT
    assert [m["role"] for m in call.body["messages"]] == ["user"]


async def test_a_claude_critic_in_a_streamed_run(upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(content="Paris.", model="local-model"),
        Reply(content="Say which country.", model="claude-sonnet-4-5"),
        Reply(content="Paris, France.", model="local-model"),
    )
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-critic", "Where?", stream=True))
    assert response.status_code == 200
    chunks = sse_chunks(response.text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Paris, France."
    assert chunks[-1]["adapter_critic"]["intermediate"]["critic"] == "Say which country."
    assert len(claude_calls(upstream)) == 1


async def test_a_claude_api_target_streams_text_and_tool_calls_as_chunks(upstream: ScriptedUpstream) -> None:
    call = {"id": "toolu_01", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    upstream.script(Reply(content="Checking.", tool_calls=[call], finish_reason="tool_calls"))
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    payload = chat("m-claude", "Weather in Oslo?", stream=True, tools=tools, max_tokens=200)
    payload["stream_options"] = {"include_usage": True}
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=payload)
    chunks = sse_chunks(response.text)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "Checking."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["id"] == "toolu_01" and calls[0]["function"]["name"] == "weather"
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"city": "Oslo"}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"]["prompt_tokens"] == 10 and chunks[-1]["usage"]["completion_tokens"] == 5
    [sent] = claude_calls(upstream)
    assert sent.body["stream"] is True and sent.body["max_tokens"] == 200
    assert sent.body["tools"] == [{"name": "weather", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize("stream", [False, True])
async def test_claude_as_every_stage_of_a_critic_run(upstream: ScriptedUpstream, stream: bool) -> None:
    upstream.script(Reply(content="Draft."), Reply(content="Critique."), Reply(content="Final."))
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-claude-critic", "Q?", stream=stream))
    assert response.status_code == 200
    if stream:
        chunks = sse_chunks(response.text)
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Final."
        ext = chunks[-1]["adapter_critic"]
    else:
        assert response.json()["choices"][0]["message"]["content"] == "Final."
        ext = response.json()["adapter_critic"]
    assert ext["intermediate"] == {"api_draft": "Draft.", "critic": "Critique.", "final": "Final."}
    # The second pass ends with the critique as a user turn after the draft: turns alternate.
    second = claude_calls(upstream)[2].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]


async def test_a_claude_adapter_edits_the_local_draft(upstream: ScriptedUpstream) -> None:
    edit = "<<<<<<< SEARCH\nParis.\n=======\nParis, France.\n>>>>>>> REPLACE"
    upstream.script(Reply(content="Paris.", model="local-model"), Reply(content=edit, model="claude-sonnet-4-5"))
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-adapter", "Where?"))
    assert response.json()["choices"][0]["message"]["content"] == "Paris, France."


async def test_a_rate_limited_claude_api_call_is_a_429_with_its_retry_after(upstream: ScriptedUpstream) -> None:
    said = "Number of request tokens has exceeded your per-minute rate limit"
    envelope = json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": said}})
    upstream.script(Reply(status=429, body=envelope, headers={"retry-after": "17"}))
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-claude"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "17"
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert "per-minute rate limit" in response.json()["error"]["message"]


async def test_an_overloaded_claude_is_retried_then_a_502(upstream: ScriptedUpstream) -> None:
    overloaded = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    upstream.script(*[Reply(status=529, body=overloaded) for _ in range(3)])
    async with serving(upstream, config(retries=2, retry_backoff_seconds=0.001)) as client:
        response = await client.post("/chat/completions", json=chat("m-claude"))
    assert len(claude_calls(upstream)) == 3
    assert response.status_code == 502
    assert response.headers["x-should-retry"] == "false"
    assert "HTTP 529: Overloaded" in response.json()["error"]["message"]


async def test_a_claude_4xx_on_the_first_call_is_relayed_with_its_message(upstream: ScriptedUpstream) -> None:
    envelope = '{"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: 999999 > 64000"}}'
    upstream.script(Reply(status=400, body=envelope))
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-claude", max_tokens=999999))
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "max_tokens: 999999 > 64000"
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_a_failing_claude_critic_degrades_to_the_draft(upstream: ScriptedUpstream) -> None:
    failed = '{"type": "error", "error": {"type": "api_error", "message": "Internal"}}'
    upstream.script(
        Reply(content="Draft.", model="local-model"), Reply(status=500, body=failed, model="claude-sonnet-4-5")
    )
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-critic"))
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Draft."
    assert body["adapter_critic"]["degraded"] is True
    assert "HTTP 500: Internal" in body["adapter_critic"]["intermediate"]["critic_error"]


async def test_an_error_event_mid_stream_ends_the_stream_with_an_error(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="Partial answer", stream_error={"type": "overloaded_error", "message": "Overloaded"}))
    async with serving(upstream) as client:
        response = await client.post("/chat/completions", json=chat("m-claude", stream=True))
    last = response.text.strip().splitlines()[-1]
    assert "[DONE]" not in response.text
    assert "overloaded_error: Overloaded" in json.loads(last.removeprefix("data: "))["error"]["message"]


async def test_deep_health_probes_claude_with_its_own_headers(upstream: ScriptedUpstream) -> None:
    async with serving(upstream) as client:
        report = (await client.get("/health", params={"deep": "1"})).json()
    assert report["targets"]["m-critic.critic"]["status"] == "ok"
    probes = [call for call in upstream.calls if call.host == "claude.test"]
    assert {call.path for call in probes} == {"/v1/models"}
    assert all(call.headers["x-api-key"] == KEY and call.headers["anthropic-version"] for call in probes)


async def test_protocol_settings_set_the_default_max_tokens_and_version(upstream: ScriptedUpstream) -> None:
    cfg = config(protocols={"anthropic": {"max_tokens": 321, "version": "2099-01-01"}})
    async with serving(upstream, cfg) as client:
        await client.post("/chat/completions", json=chat("m-claude"))
    [call] = claude_calls(upstream)
    assert call.body["max_tokens"] == 321
    assert call.headers["anthropic-version"] == "2099-01-01"


async def test_an_override_to_a_configured_claude_url_speaks_its_protocol(upstream: ScriptedUpstream) -> None:
    cfg = Config.from_dict(
        {
            "retries": 0,
            "served_models": {
                "local-critic": {"mode": "critic", "api": LOCAL, "critic": LOCAL},
                "m-claude": {"mode": "direct", "api": CLAUDE},
            },
        }
    )
    overrides = {"critic_model": "claude-haiku-4-5", "critic_base_url": CLAUDE_URL}
    async with serving(upstream, cfg) as client:
        response = await client.post("/chat/completions", json=chat("local-critic", x_adapter_critic=overrides))
    assert response.status_code == 200
    [call] = claude_calls(upstream)
    assert call.body["model"] == "claude-haiku-4-5" and call.headers["x-api-key"] == KEY


async def test_a_claude_fallback_answers_when_the_local_api_fails(upstream: ScriptedUpstream) -> None:
    api = {**LOCAL, "fallbacks": [CLAUDE]}
    cfg = Config.from_dict({"retries": 0, "served_models": {"m": {"mode": "direct", "api": api}}})
    upstream.script(Reply(status=503, body='{"error": {"message": "down"}}', model="local-model"))
    async with serving(upstream, cfg) as client:
        response = await client.post("/chat/completions", json=chat("m", "Hi"))
    assert response.json()["choices"][0]["message"]["content"] == "echo claude-sonnet-4-5: Hi"
    assert response.json()["adapter_critic"]["targets"]["api"] == f"claude-sonnet-4-5@{CLAUDE_URL}"


def test_unknown_protocol_settings_are_refused_at_load() -> None:
    from adapter_critic.errors import ConfigError

    with pytest.raises(ConfigError, match=r"protocols\.anthropic"):
        config(protocols={"anthropic": {"max_tokenz": 1}})
