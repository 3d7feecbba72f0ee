"""Every §7 error row, the degraded answers of §5, and the 500 path, through the ASGI app."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapter_critic import Config, create_app
from adapter_critic.upstream.client import Upstream

from ..conftest import UPSTREAM_URL, AppFactory, asgi_client, chat, make_config
from ..helpers import usage
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API_KEY = "sk-secret-api-123456"
ADAPTER_KEY = "sk-secret-adapter-789"

TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
UPSTREAM_5XX = Reply(status=500, body='{"error": {"message": "upstream exploded", "type": "server_error"}}')


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ADAPTER_KEY", ADAPTER_KEY)


def served_models(**extra: Any) -> dict[str, Any]:
    """make_config's served models, each with `extra` added."""
    return {
        "m-direct": {"mode": "direct", "api": {"model": "api-model", "base_url": UPSTREAM_URL}, **extra},
        "m-adapter": {
            "mode": "adapter",
            "api": {"model": "api-model", "base_url": UPSTREAM_URL},
            "adapter": {"model": "adapter-model", "base_url": UPSTREAM_URL, "api_key_env": "ADAPTER_KEY"},
            **extra,
        },
        "m-critic": {
            "mode": "critic",
            "api": {"model": "api-model", "base_url": UPSTREAM_URL},
            "critic": {"model": "critic-model", "base_url": UPSTREAM_URL},
            **extra,
        },
    }


def failing_config(**top: Any) -> Config:
    return make_config(served_models=served_models(on_review_error="fail"), **top)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The §7 envelope of an error response with this status."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


def assert_upstream_error(response: httpx.Response, stage: str, status: int = 502) -> dict[str, Any]:
    error = error_of(response, status)
    assert error["type"] == "upstream_error"
    assert f"{stage} stage" in error["message"]
    assert response.headers.get("x-should-retry") == "false"
    return error


async def post(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post("/chat/completions", json=body)


# -- 400: the body --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b'{"model": "m-direct", "messages": [', "not valid JSON"),
        (b"", "not valid JSON"),
        (b'[{"model": "m-direct"}]', "must be a JSON object"),
        (b'"m-direct"', "must be a JSON object"),
    ],
)
async def test_body_not_a_json_object(serve: AppFactory, upstream: ScriptedUpstream, content: bytes, what: str) -> None:
    async with serve() as client:
        response = await client.post("/chat/completions", content=content, headers={"content-type": "application/json"})
    error = error_of(response, 400)
    assert error["type"] == "invalid_request_error"
    assert what in error["message"]
    assert upstream.calls == []


OK_MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": OK_MESSAGES}, "model"),
        ({"model": "", "messages": OK_MESSAGES}, "model"),
        ({"model": 5, "messages": OK_MESSAGES}, "model"),
        ({"model": "m-direct"}, "messages"),
        ({"model": "m-direct", "messages": []}, "messages"),
        ({"model": "m-direct", "messages": "hi"}, "messages"),
        ({"model": "m-direct", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m-direct", "messages": [*OK_MESSAGES, {"role": "user", "content": 5}]}, "messages[1].content"),
        ({"model": "m-direct", "messages": [*OK_MESSAGES, 3]}, "messages[1]"),
        ({"model": "m-direct", "messages": OK_MESSAGES, "extra_body": 3}, "extra_body"),
        # Body checks come before the served-model lookup: no 404 for a body that is wrong anyway.
        ({"model": "no-such-model", "messages": []}, "messages"),
    ],
)
async def test_bad_fields_name_the_param(
    serve: AppFactory, upstream: ScriptedUpstream, body: dict[str, Any], param: str
) -> None:
    async with serve() as client:
        response = await post(client, body)
    error = error_of(response, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert upstream.calls == []


# -- 400: overrides -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "overrides", "param"),
    [
        ("m-direct", {"mode": "bogus"}, "x_adapter_critic.mode"),
        ("m-direct", {"max_adapter_retries": 6}, "x_adapter_critic.max_adapter_retries"),
        ("m-direct", {"max_adapter_retries": -1}, "x_adapter_critic.max_adapter_retries"),
        ("m-direct", {"api_model": 3}, "x_adapter_critic.api_model"),
        ("m-direct", {"api_base_url": "http://evil.test/v1"}, "x_adapter_critic.api_base_url"),
        # A stage the mode does not use is still checked against the allowlist, even for an unknown model.
        ("m-direct", {"critic_base_url": "http://evil.test/v1"}, "x_adapter_critic.critic_base_url"),
        ("no-such-model", {"api_base_url": "http://evil.test/v1"}, "x_adapter_critic.api_base_url"),
        # A partial target for a stage with no configured target.
        ("m-direct", {"mode": "critic", "critic_model": "x"}, "x_adapter_critic.critic_base_url"),
        ("m-direct", {"mode": "adapter", "adapter_base_url": UPSTREAM_URL}, "x_adapter_critic.adapter_model"),
    ],
)
async def test_bad_overrides(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, overrides: dict[str, Any], param: str
) -> None:
    async with serve() as client:
        response = await post(client, chat(model, x_adapter_critic=overrides))
    error = error_of(response, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert upstream.calls == []


async def test_unknown_override_field_is_named(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        top = await post(client, chat("m-direct", x_adapter_critic={"temperature_override": 1}))
        nested = await post(client, chat("m-direct", extra_body={"x_adapter_critic": {"temperature_override": 1}}))
    for response, where in ((top, "x_adapter_critic"), (nested, "extra_body.x_adapter_critic")):
        error = error_of(response, 400)
        assert error["type"] == "invalid_request_error"
        assert error["param"] == f"{where}.temperature_override"
        assert "temperature_override" in error["message"]
    assert upstream.calls == []


async def test_overrides_disabled(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config(allow_overrides=False)) as client:
        refused = await post(client, chat("m-direct", x_adapter_critic={"mode": "direct"}))
        plain = await post(client, chat("m-direct"))
    error = error_of(refused, 400)
    assert error["type"] == "invalid_request_error"
    assert "allow_overrides" in error["message"]
    assert plain.status_code == 200
    assert len(upstream.calls) == 1


async def test_unknown_served_model_is_404(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        response = await post(client, chat("gpt-4o"))
        # Resolution (400) comes after the served-model lookup (404).
        partial = await post(client, chat("gpt-4o", x_adapter_critic={"mode": "critic", "critic_model": "x"}))
    for result in (response, partial):
        error = error_of(result, 404)
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "model_not_found"
        assert "gpt-4o" in error["message"]
    assert upstream.calls == []


async def test_stream_must_be_a_boolean(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    # `stream: true` itself is served now (§8, tested with streaming); a non-boolean is still a 400 naming it.
    async with serve() as client:
        response = await post(client, chat("m-direct", stream="yes"))
    error = error_of(response, 400)
    assert error["param"] == "stream"
    assert upstream.calls == []


# -- 413 ------------------------------------------------------------------------------------------------------------

LIMIT = 300


def big_body() -> bytes:
    body = json.dumps(chat("m-direct", "x" * (2 * LIMIT))).encode()
    assert len(body) > LIMIT
    return body


async def test_body_too_large_by_content_length(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config(max_body_bytes=LIMIT)) as client:
        response = await client.post("/chat/completions", content=big_body())
        small = await post(client, chat("m-direct"))
    error = error_of(response, 413)
    assert error["type"] == "invalid_request_error"
    assert small.status_code == 200
    assert len(upstream.calls) == 1


async def chunks(body: bytes, size: int = 64) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_body_too_large_without_content_length(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(make_config(max_body_bytes=LIMIT)) as client:
        request = client.build_request("POST", "/chat/completions", content=chunks(big_body()))
        assert "content-length" not in request.headers
        response = await client.send(request)
        small = json.dumps(chat("m-direct")).encode()
        ok_request = client.build_request("POST", "/chat/completions", content=chunks(small, 8))
        assert "content-length" not in ok_request.headers
        ok = await client.send(ok_request)
    error = error_of(response, 413)
    assert error["type"] == "invalid_request_error"
    assert ok.status_code == 200
    assert len(upstream.calls) == 1


# -- upstream 4xx -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["m-direct", "m-adapter", "m-critic"])
@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_first_call_4xx_is_relayed_with_keys_redacted(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, status: int
) -> None:
    upstream_error = {
        "error": {
            "message": f"Incorrect API key provided: {API_KEY}; also not {ADAPTER_KEY}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    upstream.script(Reply(status=status, body=json.dumps(upstream_error)))
    async with serve(make_config(served_models=served_models())) as client:
        response = await post(client, chat(model))

    assert response.status_code == status
    assert response.json() == {
        "error": {
            "message": "Incorrect API key provided: ***; also not ***.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    assert API_KEY not in response.text and ADAPTER_KEY not in response.text
    assert response.headers.get("x-should-retry") == "false"
    assert len(upstream.calls) == 1


async def test_first_call_4xx_without_envelope_gets_ours(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=400, body=f"<html>bad request for key {API_KEY}</html>"))
    async with serve() as client:
        response = await post(client, chat("m-critic"))
    error = error_of(response, 400)
    assert "api_draft stage" in error["message"]
    assert API_KEY not in response.text
    assert response.headers.get("x-should-retry") == "false"


@pytest.mark.parametrize(
    ("model", "replies", "stage"),
    [
        ("m-adapter", [Reply("draft")], "adapter"),
        ("m-critic", [Reply("draft")], "critic"),
        ("m-critic", [Reply("draft"), Reply("critique")], "api_final"),
    ],
)
async def test_later_stage_4xx_is_502_naming_the_stage_when_failing(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, replies: list[Reply], stage: str
) -> None:
    upstream_error = {"error": {"message": f"bad request, key {API_KEY}", "type": "invalid_request_error"}}
    upstream.script(*replies, Reply(status=400, body=json.dumps(upstream_error)))
    async with serve(failing_config()) as client:
        response = await post(client, chat(model))
    error = assert_upstream_error(response, stage)
    assert API_KEY not in response.text
    assert error["message"] != upstream_error["error"]["message"]
    assert len(upstream.calls) == len(replies) + 1


@pytest.mark.parametrize(
    ("model", "replies", "stage"),
    [
        ("m-adapter", [Reply("draft")], "adapter"),
        ("m-critic", [Reply("draft")], "critic"),
        ("m-critic", [Reply("draft"), Reply("critique")], "api_final"),
    ],
)
async def test_later_stage_4xx_degrades_by_default(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, replies: list[Reply], stage: str
) -> None:
    upstream.script(*replies, Reply(status=400, body='{"error": {"message": "context too long"}}'))
    async with serve() as client:
        response = await post(client, chat(model))
    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"]["content"] == "draft"
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert f"{stage}_error" in ext["intermediate"]
    assert "context too long" in ext["intermediate"][f"{stage}_error"]


# -- 429 ------------------------------------------------------------------------------------------------------------


async def test_429_is_relayed_with_retry_after(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(status=429, body='{"error": {"message": "slow down", "type": "requests"}}', headers={"Retry-After": "7"})
    )
    async with serve() as client:
        response = await post(client, chat("m-direct"))
    error = error_of(response, 429)
    assert error["type"] == "rate_limit_error"
    assert response.headers.get("retry-after") == "7"
    # The SDKs may retry a 429 after Retry-After; only other upstream errors say x-should-retry: false.
    assert "x-should-retry" not in response.headers


async def test_429_on_a_later_stage_with_fail(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("draft"), Reply(status=429, body="{}", headers={"Retry-After": "30"}))
    async with serve(failing_config()) as client:
        response = await post(client, chat("m-critic"))
    error = error_of(response, 429)
    assert error["type"] == "rate_limit_error"
    assert "critic stage" in error["message"]
    assert response.headers.get("retry-after") == "30"


async def test_429_without_retry_after_gets_the_servers_estimate(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=429, body="{}"))
    async with serve() as client:
        response = await post(client, chat("m-adapter"))
    error_of(response, 429)
    # The upstream said nothing: the client is told this server's own backoff, in whole seconds (at least 1).
    assert response.headers["retry-after"] == "1"
    assert "x-should-retry" not in response.headers


# -- 5xx, unreachable, not an OpenAI response, timeout --------------------------------------------------------------

STAGES = [
    ("m-direct", 0, "api"),
    ("m-adapter", 0, "api"),
    ("m-adapter", 1, "adapter"),
    ("m-critic", 0, "api_draft"),
    ("m-critic", 1, "critic"),
    ("m-critic", 2, "api_final"),
]


@pytest.mark.parametrize(("model", "before", "stage"), STAGES)
@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_502_naming_the_stage(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, before: int, stage: str, status: int
) -> None:
    upstream.script(*[Reply("fine") for _ in range(before)], Reply(status=status, body=f'{{"key": "{API_KEY}"}}'))
    async with serve(failing_config()) as client:
        response = await post(client, chat(model))
    error = assert_upstream_error(response, stage)
    assert API_KEY not in response.text
    assert len(upstream.calls) == before + 1
    assert error["code"] != "upstream_timeout"


@pytest.mark.parametrize(
    "body",
    [
        "<html><body>502 Bad Gateway</body></html>",
        '{"id": "x", "object": "chat.completion", "choices": []}',
        '{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assis',
        '{"choices": [{"message": "just a string"}]}',
        '{"error": "this is not a completion"}',
    ],
)
@pytest.mark.parametrize(("model", "before", "stage"), [("m-direct", 0, "api"), ("m-critic", 1, "critic")])
async def test_not_an_openai_response_is_502(
    serve: AppFactory, upstream: ScriptedUpstream, body: str, model: str, before: int, stage: str
) -> None:
    upstream.script(*[Reply("fine") for _ in range(before)], Reply(status=200, body=body))
    async with serve(failing_config()) as client:
        response = await post(client, chat(model))
    assert_upstream_error(response, stage)


@pytest.mark.parametrize(("model", "before", "stage"), STAGES)
async def test_timeout_is_504(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, before: int, stage: str
) -> None:
    upstream.script(*[Reply("fine") for _ in range(before)], Reply("too late", delay=5))
    async with serve(failing_config(timeout_seconds=0.2)) as client:
        response = await post(client, chat(model))
    error = assert_upstream_error(response, stage, status=504)
    assert error["code"] == "upstream_timeout"


async def test_timeout_on_a_reviewer_degrades_by_default(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("draft"), Reply("late critique", delay=5))
    async with serve(make_config(timeout_seconds=0.2)) as client:
        response = await post(client, chat("m-critic"))
    assert response.status_code == 200
    ext = response.json()["adapter_critic"]
    assert ext["degraded"] is True
    assert "critic_error" in ext["intermediate"]
    assert len(upstream.calls) == 2


def closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextlib.asynccontextmanager
async def real_network_app(config: Config, upstream: ScriptedUpstream) -> AsyncIterator[httpx.AsyncClient]:
    """The app with a real network client; only `upstream.test` is routed to the scripted upstream."""
    mounts = {"http://upstream.test": httpx.ASGITransport(app=upstream.app)}
    async with httpx.AsyncClient(mounts=mounts) as network:
        app = create_app(config, http_client=network)
        async with asgi_client(app) as client:
            yield client


async def test_unreachable_first_call_is_502(upstream: ScriptedUpstream) -> None:
    dead = closed_port_url()
    cfg = make_config(served_models={"m-direct": {"mode": "direct", "api": {"model": "api-model", "base_url": dead}}})
    async with real_network_app(cfg, upstream) as client:
        response = await post(client, chat("m-direct"))
    error = assert_upstream_error(response, "api")
    assert "could not be reached" in error["message"]


@pytest.mark.parametrize("on_review_error", ["draft", "fail"])
async def test_unreachable_reviewer(upstream: ScriptedUpstream, on_review_error: str) -> None:
    served = {
        "mode": "critic",
        "api": {"model": "api-model", "base_url": UPSTREAM_URL},
        "critic": {"model": "critic-model", "base_url": closed_port_url()},
        "on_review_error": on_review_error,
    }
    upstream.script(Reply("draft"))
    async with real_network_app(make_config(served_models={"m-critic": served}), upstream) as client:
        response = await post(client, chat("m-critic"))
    if on_review_error == "fail":
        assert_upstream_error(response, "critic")
    else:
        assert response.status_code == 200
        assert response.json()["adapter_critic"]["degraded"] is True
    assert len(upstream.calls) == 1


# -- degraded answers (§5) ------------------------------------------------------------------------------------------


async def test_adapter_failure_degrades_to_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("The draft.", tool_calls=TOOL_CALLS, finish_reason="tool_calls", usage=usage(5, 6)), UPSTREAM_5XX
    )
    async with serve() as client:
        response = await post(client, chat("m-adapter"))

    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "The draft.", "tool_calls": TOOL_CALLS}
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    intermediate = ext["intermediate"]
    assert set(intermediate) == {"api_draft", "api_draft_tool_calls", "adapter_error", "final"}
    assert intermediate["final"] == "The draft."
    assert "adapter stage" in intermediate["adapter_error"]
    assert ext["tokens"]["stages"] == {"api": usage(5, 6), "adapter": usage(0, 0)}
    assert data["usage"] == usage(5, 6) == ext["tokens"]["total"]
    assert set(ext["timings_ms"]) == {"api", "adapter", "total"}


async def test_adapter_failure_after_invalid_replies(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    cfg = make_config(served_models=served_models(max_adapter_retries=3))
    upstream.script(Reply("The draft."), Reply("not a review", usage=usage(7, 8)), UPSTREAM_5XX)
    async with serve(cfg) as client:
        response = await post(client, chat("m-adapter"))

    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"]["content"] == "The draft."
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert set(ext["intermediate"]) == {"api_draft", "adapter_error", "adapter_rejection_reason", "final"}
    assert "neither 'lgtm' nor SEARCH/REPLACE" in ext["intermediate"]["adapter_rejection_reason"]
    assert ext["tokens"]["stages"]["adapter"] == usage(7, 8)
    assert len(upstream.calls) == 3


async def test_critic_failure_degrades_to_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("The draft.", usage=usage(5, 6)), UPSTREAM_5XX)
    async with serve() as client:
        response = await post(client, chat("m-critic"))

    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "The draft."}
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert set(ext["intermediate"]) == {"api_draft", "critic_error", "final"}
    assert ext["intermediate"]["final"] == "The draft."
    assert "critic stage" in ext["intermediate"]["critic_error"]
    # The second pass never ran: it is in neither tokens nor timings.
    assert ext["tokens"]["stages"] == {"api_draft": usage(5, 6), "critic": usage(0, 0)}
    assert set(ext["timings_ms"]) == {"api_draft", "critic", "total"}
    assert data["usage"] == usage(5, 6)
    assert len(upstream.calls) == 2


async def test_second_pass_failure_degrades_to_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply("The draft.", finish_reason="length", usage=usage(1, 2)),
        Reply("- Too short.", usage=usage(3, 4)),
        UPSTREAM_5XX,
    )
    async with serve() as client:
        response = await post(client, chat("m-critic"))

    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "The draft."}
    assert data["choices"][0]["finish_reason"] == "length"
    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert ext["intermediate"] == {
        "api_draft": "The draft.",
        "critic": "- Too short.",
        "api_final_error": ext["intermediate"]["api_final_error"],
        "final": "The draft.",
    }
    assert "api_final stage" in ext["intermediate"]["api_final_error"]
    assert ext["tokens"]["stages"] == {"api_draft": usage(1, 2), "critic": usage(3, 4), "api_final": usage(0, 0)}
    assert set(ext["timings_ms"]) == {"api_draft", "critic", "api_final", "total"}
    assert data["usage"] == usage(4, 6)


async def test_first_call_failure_is_never_degraded(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(UPSTREAM_5XX, UPSTREAM_5XX)
    async with serve() as client:
        adapter = await post(client, chat("m-adapter"))
        critic = await post(client, chat("m-critic"))
    assert_upstream_error(adapter, "api")
    assert_upstream_error(critic, "api_draft")
    assert len(upstream.calls) == 2


async def test_no_degraded_key_when_all_is_well(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        response = await post(client, chat("m-critic"))
    ext = response.json()["adapter_critic"]
    assert "degraded" not in ext
    assert not any(key.endswith("_error") for key in ext["intermediate"])


# -- 500 ------------------------------------------------------------------------------------------------------------


async def test_unexpected_error_is_500_without_internals(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"boom in /srv/secret/module.py with {API_KEY}")

    monkeypatch.setattr(Upstream, "complete", explode)
    with caplog.at_level(logging.ERROR, logger="adapter_critic"):
        async with serve() as client:
            response = await post(client, chat("m-direct"))

    error = error_of(response, 500)
    assert error["type"] == "server_error"
    for internal in ("boom", "/srv/secret", "RuntimeError", "Traceback", API_KEY, "File "):
        assert internal not in response.text
    request_id = re.search(r"chatcmpl-[0-9a-f]+", error["message"])
    assert request_id is not None
    assert any(request_id.group() in record.getMessage() and record.exc_info for record in caplog.records)


async def test_unexpected_error_outside_the_service_is_500_envelope(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter_critic.http.chat import ChatHandler

    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom in /srv/secret/module.py")

    monkeypatch.setattr(ChatHandler, "chat", explode)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        app = create_app(make_config(), http_client=network)
        async with asgi_client(app, raise_app_exceptions=False) as client:
            response = await post(client, chat("m-direct"))
    error = error_of(response, 500)
    assert error["type"] == "server_error"
    assert "boom" not in response.text and "RuntimeError" not in response.text


# -- n ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["m-adapter", "m-critic"])
@pytest.mark.parametrize("n", [2, 0, "2"])
async def test_n_other_than_one_is_refused_by_a_one_answer_workflow(
    serve: AppFactory, upstream: ScriptedUpstream, model: str, n: object
) -> None:
    async with serve() as client:
        response = await post(client, chat(model, n=n))
    error = error_of(response, 400)
    assert error["param"] == "n"
    assert "one choice" in error["message"]
    assert upstream.calls == []  # refused before any stage ran


@pytest.mark.parametrize("model", ["m-adapter", "m-critic"])
async def test_n_of_one_is_fine_in_every_mode(serve: AppFactory, upstream: ScriptedUpstream, model: str) -> None:
    async with serve() as client:
        response = await post(client, chat(model, n=1))
    assert response.status_code == 200
    assert upstream.calls[0].body["n"] == 1  # forwarded to the API stage like any option


@pytest.mark.parametrize(
    ("upstream_error", "relayed"),
    [
        ({"message": "bad", "type": "invalid_request_error", "param": "x", "code": "c"}, None),  # whole: as is
        ({"message": "bad"}, {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}),
        (
            {"message": "bad", "code": 42},
            {"message": "bad", "type": "invalid_request_error", "param": None, "code": 42},
        ),
    ],
)
async def test_a_relayed_upstream_envelope_always_has_the_four_fields(
    serve: AppFactory, upstream: ScriptedUpstream, upstream_error: dict[str, Any], relayed: dict[str, Any] | None
) -> None:
    upstream.script(Reply(status=400, body=json.dumps({"error": upstream_error})))
    async with serve() as client:
        response = await post(client, chat("m-direct"))
    assert error_of(response, 400) == (relayed or upstream_error)


async def test_a_4xx_body_without_a_message_is_answered_in_our_words(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(status=400, body='{"error": {"": ""}}'))
    async with serve() as client:
        response = await post(client, chat("m-direct"))
    error = error_of(response, 400)
    assert "api stage's upstream" in error["message"] and "HTTP 400" in error["message"]


async def test_direct_relays_every_choice_of_n(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": f"answer {i}"}, "finish_reason": "stop"}
        for i in range(3)
    ]
    completion = {"choices": choices, "usage": {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}}
    upstream.script(Reply(body=json.dumps(completion)))
    async with serve() as client:
        response = await post(client, chat("m-direct", n=3))
    assert response.status_code == 200
    assert [(c["index"], c["message"]["content"]) for c in response.json()["choices"]] == [
        (0, "answer 0"),
        (1, "answer 1"),
        (2, "answer 2"),
    ]
    assert upstream.calls[0].body["n"] == 3
