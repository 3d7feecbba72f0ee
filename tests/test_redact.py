"""Redaction: no configured key, inbound key or forwarded caller token reaches a client or a log from any error path,
in any of the forms a key is escaped to (JSON, URLs, repr)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from adapter_critic import Config
from adapter_critic.redact import redact, secret_values
from adapter_critic.service.compose import compose

from .conftest import KEYS_ENV, SERVER_KEY, UPSTREAM_URL, chat, make_config
from .helpers import completion, hostile, nested, sse

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("server_keys")]

CANARY = "canary"
UP_KEY = "sk-SECRET/canary+123="  # `/`, `+` and `=` have escaped forms in JSON and in URLs
ADAPTER_KEY = "sk-adapter-canary-456"
INBOUND_CANARY = "inbound-canary-789"
FORWARDED = "sk-callers-own-canary-000"


# Direct served models named for how `redaction_handler` fails their upstream call, each with the key it was given.
FAILING = (
    "relay4xx",
    "relay4xx-escaped",
    "plain4xx",
    "rate429",
    "fail500",
    "unreachable",
    "timeout",
    "badjson",
    "deep",
)


def redaction_config(**top: Any) -> Config:
    def target(model: str, **extra: Any) -> dict[str, Any]:
        return {"model": model, "base_url": UPSTREAM_URL, **extra}

    served: dict[str, Any] = {name: {"mode": "direct", "api": target(name)} for name in (*FAILING, "stream-error")}
    served["degraded-adapter"] = {
        "mode": "adapter",
        "api": target("ok"),
        "adapter": target("fail500", api_key_env="ADAPTER_KEY"),
    }
    served["degraded-critic"] = {"mode": "critic", "api": target("ok"), "critic": target("unreachable")}
    served["failing-critic"] = {
        "mode": "critic",
        "api": target("ok"),
        "critic": target("relay4xx"),
        "on_review_error": "fail",
    }
    return make_config(served_models=served, timeout_seconds=5, **top)


def echo_text(request: httpx.Request) -> str:
    """What a careless upstream says back: the key it was given, in a message and in an echo of every header."""
    key = (request.headers.get("authorization") or "").removeprefix("Bearer ")
    headers = dict(request.headers)
    return json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {key}. Authorization: Bearer {key}",
                "type": "invalid_request_error",
                "headers": headers,
            }
        }
    )


async def redaction_handler(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    model = body["model"]
    streaming = bool(body.get("stream"))
    if model == "ok":
        if streaming:
            return sse({"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]})
        return httpx.Response(200, json=completion())
    if model == "relay4xx":
        return httpx.Response(401, content=echo_text(request).encode(), headers={"content-type": "application/json"})
    if model == "relay4xx-escaped":
        return httpx.Response(400, content=echo_text(request).replace("/", "\\/").encode())
    if model == "plain4xx":
        key = request.headers.get("authorization", "")
        return httpx.Response(400, content=f"<html>bad request, you sent {key} {UP_KEY}</html>".encode())
    if model == "rate429":
        return httpx.Response(429, content=echo_text(request).encode(), headers={"retry-after": "1"})
    if model == "fail500":
        return httpx.Response(500, content=echo_text(request).encode())
    if model == "unreachable":
        raise httpx.ConnectError(
            f"connection refused while sending {request.headers.get('authorization')}", request=request
        )
    if model == "timeout":
        raise httpx.ReadTimeout(f"timed out; {request.headers.get('authorization')}", request=request)
    if model == "badjson":
        return httpx.Response(200, content=f"not json {request.headers.get('authorization')}".encode())
    if model == "stream-error":
        if streaming:
            return sse({"error": {"message": f"upstream broke, key {UP_KEY}, {request.headers.get('authorization')}"}})
        return httpx.Response(200, content=b"{")
    if model == "deep":
        return httpx.Response(200, content=f'{{"key": "{UP_KEY}", "x": {nested(10_000)}}}'.encode())
    raise AssertionError(model)


async def test_no_key_leaks_from_any_error_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", UP_KEY)
    monkeypatch.setenv("ADAPTER_KEY", ADAPTER_KEY)
    monkeypatch.setenv(KEYS_ENV, INBOUND_CANARY)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="adapter_critic")
    said: list[str] = []

    def keep(response: httpx.Response) -> httpx.Response:
        said.append(f"{response.status_code} {dict(response.headers)} {response.text}")
        return response

    async def post(client: httpx.AsyncClient, body: Any, **headers: str) -> httpx.Response:
        return keep(await client.post("/chat/completions", json=body, headers=headers))

    statuses: dict[str, int] = {}
    async with hostile(redaction_config(), redaction_handler) as client:
        for model in (*FAILING, "failing-critic"):
            statuses[model] = (await post(client, chat(model))).status_code
            statuses[f"{model} (stream)"] = (await post(client, chat(model, stream=True))).status_code
        for model in ("degraded-adapter", "degraded-critic"):
            for stream in (False, True):
                response = await post(client, chat(model, stream=stream))
                assert response.status_code == 200 and "_error" in response.text, response.text
        stream_error = await post(client, chat("stream-error", stream=True))
        assert stream_error.status_code == 502, stream_error.text
        overridden = await post(
            client, chat("relay4xx", x_adapter_critic={"api_base_url": f"http://u:{UP_KEY}@x.test/v1"})
        )
        assert overridden.status_code == 400
        # The server's messages echo what the request said; a request that says a key gets `***` back. A model
        # named like this key (`=` in it) is no model name at all: refused before anything echoes it.
        assert (await post(client, chat(UP_KEY))).status_code == 400
        assert (
            await post(client, chat("relay4xx", x_adapter_critic={"api_model": UP_KEY, "bogus": 1}))
        ).status_code == 400

        # An unexpected failure whose exception text holds a key: logged with its traceback, never said.
        def explode(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"boom with {UP_KEY} and {ADAPTER_KEY}")

        monkeypatch.setattr("adapter_critic.protocols.openai.decode_request", explode)
        assert (await post(client, chat("relay4xx"))).status_code == 500
        monkeypatch.undo()
        monkeypatch.setenv("OPENAI_API_KEY", UP_KEY)
        monkeypatch.setenv("ADAPTER_KEY", ADAPTER_KEY)
        monkeypatch.setenv(KEYS_ENV, INBOUND_CANARY)

    assert statuses == {
        "relay4xx": 401, "relay4xx (stream)": 401, "relay4xx-escaped": 400, "relay4xx-escaped (stream)": 400,
        "plain4xx": 400, "plain4xx (stream)": 400, "rate429": 429, "rate429 (stream)": 429,
        "fail500": 502, "fail500 (stream)": 502, "unreachable": 502, "unreachable (stream)": 502,
        "timeout": 504, "timeout (stream)": 504, "badjson": 502, "badjson (stream)": 502,
        "deep": 502, "deep (stream)": 502, "failing-critic": 502, "failing-critic (stream)": 502,
    }  # fmt: skip

    # Inbound auth failures, presenting keys the server holds.
    async with hostile(redaction_config(auth_api_keys_env=KEYS_ENV), redaction_handler) as client:
        for token in (UP_KEY, ADAPTER_KEY, INBOUND_CANARY + "x", INBOUND_CANARY[:-1]):
            assert (await post(client, chat("relay4xx"), authorization=f"Bearer {token}")).status_code == 401

    # A target that forwards the caller's own key: the caller's key is not echoed back or logged either.
    forward = make_config(
        served_models={
            "fwd": {
                "mode": "direct",
                "api": {"model": "relay4xx", "base_url": UPSTREAM_URL, "forward_client_authorization": True},
            }
        }
    )
    async with hostile(forward, redaction_handler) as client:
        assert (await post(client, chat("fwd"), authorization=f"Bearer {FORWARDED}")).status_code == 401

    logged = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert "Traceback" in logged and "boom with ***" in logged  # the 500 was logged, redacted
    assert any("degraded" in s or "_error" in s for s in said)
    for text in (*said, logged):
        assert CANARY not in text.lower(), text


async def test_an_upstream_error_stays_readable_under_a_key_made_of_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "4")  # a local server's placeholder key; the upstream's status code holds a 4
    said = "max_tokens: 4 is over this model's limit"
    envelope = {"error": {"message": said, "type": "invalid_request_error", "param": "max_tokens", "code": 400}}

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=envelope)

    async with hostile(make_config(), handler) as client:
        response = await client.post("/chat/completions", json=chat("m-direct"))
    # The upstream's own envelope, its texts masked and its numbers whole: the client reads why, never the key.
    assert response.status_code == 400
    assert response.json()["error"] == {**envelope["error"], "message": "max_tokens: *** is over this model's limit"}


def test_secret_forms() -> None:
    values = secret_values([], [UP_KEY])
    text = (
        f"{UP_KEY} | {json.dumps(UP_KEY)} | {UP_KEY.replace('/', chr(92) + '/')} | {UP_KEY!r} | "
        "sk-SECRET%2Fcanary%2B123%3D | Bearer some-other-token-123 | http://user:pw@host/ | bearer tokens"
    )
    clean = redact(text, values)
    assert CANARY not in clean
    assert "some-other-token" not in clean and "user:pw" not in clean
    assert "bearer tokens" in clean  # short words after "bearer" are prose, not tokens


def test_every_configured_key_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTER_KEY", ADAPTER_KEY)
    monkeypatch.setenv(KEYS_ENV, f"{INBOUND_CANARY}, other-inbound-canary")
    config = make_config(
        auth_api_keys_env=KEYS_ENV,
        served_models={
            "m": {
                "mode": "adapter",
                "api": {"model": "a", "base_url": UPSTREAM_URL},
                "adapter": {"model": "b", "base_url": UPSTREAM_URL, "api_key_env": "ADAPTER_KEY"},
            }
        },
    )
    secrets = compose(config).secrets
    text = f"{SERVER_KEY} {ADAPTER_KEY} {INBOUND_CANARY} other-inbound-canary"
    assert secrets.redact(text) == "*** *** *** ***"
