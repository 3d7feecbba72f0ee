"""Security and hostile input (issue 5): inbound auth, credential forwarding, override hardening, limits, redaction.

Hostile upstreams are `httpx.MockTransport` handlers, so a test can answer with an endless body, echo the request's
headers back, or fail with a chosen exception text.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from adapter_critic import AdapterCriticMiddleware, Config, ConfigError, create_app
from adapter_critic.errors import RequestError
from adapter_critic.http.auth import InboundAuth
from adapter_critic.http.service import compose
from adapter_critic.pipeline.resolve import bind_key, check_overrides, resolve
from adapter_critic.redact import redact, secret_values
from adapter_critic.request.decode import Message, Overrides
from adapter_critic.upstream.urlguard import ip_of, override_url_problem
from adapter_critic.workflows.edits import (
    MAX_EDIT_BLOCK_CHARS,
    MAX_EDIT_BLOCKS,
    EditError,
    apply_edits,
    parse_edits,
    review,
)
from adapter_critic.workflows.prompts import render_conversation, render_tool_calls

from .conftest import UPSTREAM_URL, AppFactory, asgi_client, chat, make_config, run_server
from .middleware_app import LocalModel, local_config
from .scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

KEYS_ENV = "AC_TEST_INBOUND_KEYS"
INBOUND = "inbound-key-0123456789"
ROTATED = "inbound-key-rotated-987"
SERVER_KEY = "sk-server-key-0123456789"
CLIENT_KEY = "sk-client-own-key-456789"

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv(KEYS_ENV, f" {INBOUND} , {ROTATED},")


def envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def completion(content: str = "fine", **message: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content, **message}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


@contextlib.asynccontextmanager
async def client_for(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app) as client:
        yield client


@contextlib.asynccontextmanager
async def hostile(config: Config, handler: Handler) -> AsyncIterator[httpx.AsyncClient]:
    """The app under test with its upstream calls answered by `handler`."""
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as network,
        client_for(create_app(config, http_client=network)) as client,
    ):
        yield client


# ======================================================================================================================
# 1. Inbound auth
# ======================================================================================================================


def auth_config(**top: Any) -> Config:
    return make_config(auth_api_keys_env=KEYS_ENV, **top)


# (method, path, body, status once authenticated)
ROUTES: list[tuple[str, str, Any, int]] = [
    ("POST", "/chat/completions", chat("m-direct"), 200),
    ("GET", "/models", None, 200),
    ("GET", "/no/such/path", None, 404),
    ("GET", "/chat/completions", None, 405),
]
BAD_AUTHORIZATIONS = [
    {},
    {"authorization": "Bearer wrong-key"},
    {"authorization": f"Bearer {INBOUND}x"},
    {"authorization": f"Bearer {INBOUND[:-1]}"},
    {"authorization": f"Basic {INBOUND}"},
    {"authorization": INBOUND},
    {"authorization": "Bearer "},
    {"authorization": f"Bearer {SERVER_KEY}"},  # the upstream key is not an inbound key
]


async def test_auth_refuses_every_route_without_an_accepted_key(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(auth_config()) as client:
        for method, path, body, _ in ROUTES:
            for headers in BAD_AUTHORIZATIONS:
                response = await client.request(method, path, json=body, headers=headers)
                error = envelope(response, 401)
                assert error["type"] == "authentication_error"
                assert error["code"] == "invalid_api_key"
                assert response.headers["www-authenticate"] == "Bearer"
                assert INBOUND not in response.text
    assert upstream.calls == []


async def test_auth_lets_every_accepted_key_in(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(auth_config()) as client:
        for key in (INBOUND, ROTATED):
            for scheme in ("Bearer", "bearer", "BEARER"):
                for method, path, body, status in ROUTES:
                    headers = {"authorization": f"{scheme} {key}"}
                    response = await client.request(method, path, json=body, headers=headers)
                    assert response.status_code == status, (method, path, response.text)
    # The inbound key is ours: it is never what goes upstream.
    assert upstream.calls and all(c.headers["authorization"] == f"Bearer {SERVER_KEY}" for c in upstream.calls)


async def test_health_needs_no_key(serve: AppFactory) -> None:
    async with serve(auth_config()) as client:
        response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_auth_is_off_by_default(serve: AppFactory) -> None:
    async with serve() as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 200
        assert (await client.get("/models")).status_code == 200


async def test_keys_rotate_without_restart(serve: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    async with serve(auth_config()) as client:
        old = {"authorization": f"Bearer {INBOUND}"}
        assert (await client.get("/models", headers=old)).status_code == 200
        monkeypatch.setenv(KEYS_ENV, "brand-new-key-42")
        assert (await client.get("/models", headers=old)).status_code == 401
        assert (await client.get("/models", headers={"authorization": "Bearer brand-new-key-42"})).status_code == 200


@pytest.mark.parametrize("value", [None, "", " ", " , ,"])
async def test_no_configured_keys_fails_closed(
    serve: AppFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(KEYS_ENV)
    else:
        monkeypatch.setenv(KEYS_ENV, value)
    caplog.set_level(logging.WARNING, logger="adapter_critic")
    async with serve(auth_config()) as client:
        for headers in ({}, {"authorization": "Bearer "}, {"authorization": "Bearer anything-at-all"}):
            error = envelope(await client.post("/chat/completions", json=chat("m-direct"), headers=headers), 401)
            assert error["type"] == "authentication_error"
            assert "no accepted keys" in error["message"]
        assert (await client.get("/health")).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if KEYS_ENV in r.getMessage()]
    assert len(warnings) == 1  # once, not per request
    assert "unset or empty" in warnings[0]


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every accepted key is compared, with `hmac.compare_digest` over equal-length digests, even after a match."""
    monkeypatch.setenv(KEYS_ENV, "first-key-111,second-key-222,third-key-333")
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    auth = InboundAuth(KEYS_ENV)
    for token, accepted in ((b"first-key-111", True), (b"third-key-333", True), (b"x", False), (b"a" * 500, False)):
        compared.clear()
        scope = {"type": "http", "headers": [(b"authorization", b"Bearer " + token)]}
        assert (auth.check(scope) is None) is accepted
        assert len(compared) == 3
        assert {len(a) for a, _ in compared} | {len(b) for _, b in compared} == {32}


async def test_standalone_app_needs_the_key_outside_v1_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter_critic.asgi import standalone_app

    path = tmp_path / "auth.toml"
    path.write_text(
        f'auth_api_keys_env = "{KEYS_ENV}"\n'
        '[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://upstream.test/v1" }\n'
    )
    monkeypatch.setenv("ADAPTER_CRITIC_CONFIG", str(path))
    key = {"authorization": f"Bearer {INBOUND}"}
    async with client_for(standalone_app()) as client:
        assert (await client.get("/v1/health")).status_code == 200
        for path_ in ("/v1/models", "/elsewhere", "/", "/v1"):
            assert envelope(await client.get(path_), 401)["type"] == "authentication_error"
        assert (await client.get("/v1/models", headers=key)).status_code == 200
        assert envelope(await client.get("/elsewhere", headers=key), 404)["type"] == "invalid_request_error"


async def test_mounted_app_keeps_health_public(upstream: ScriptedUpstream) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        api = create_app(auth_config(), http_client=network)
        parent = Starlette(routes=[Mount("/api/v1", app=api)])
        async with client_for(parent) as client:
            assert (await client.get("/api/v1/health")).status_code == 200
            assert (await client.get("/api/v1/models")).status_code == 401
            ok = await client.get("/api/v1/models", headers={"authorization": f"Bearer {INBOUND}"})
            assert ok.status_code == 200


async def test_middleware_asks_for_the_key_only_on_what_it_serves() -> None:
    local = LocalModel()
    app = AdapterCriticMiddleware(local.app, config=local_config(auth_api_keys_env=KEYS_ENV))
    async with client_for(app) as client:
        refused = await client.post("/v1/chat/completions", json=chat("local-adapter"))
        assert envelope(refused, 401)["type"] == "authentication_error"
        assert local.seen == []
        # Not ours: another model on the chat path, other paths, other methods — the wrapped app decides.
        other_model = await client.post("/v1/chat/completions", json=chat("base"))
        other_path = await client.post("/v1/embeddings", json={"input": "x"})
        other_method = await client.get("/v1/chat/completions")
        assert [r.status_code for r in (other_model, other_path, other_method)] == [200, 200, 200]
        assert [s.path for s in local.seen] == ["/v1/chat/completions", "/v1/embeddings", "/v1/chat/completions"]
        local.seen.clear()
        served = await client.post(
            "/v1/chat/completions", json=chat("local-adapter"), headers={"authorization": f"Bearer {INBOUND}"}
        )
    assert served.status_code == 200
    assert served.json()["adapter_critic"]["mode"] == "adapter"
    # In-process stages get the configured key (OPENAI_API_KEY here), never the caller's inbound key.
    assert [s.headers.get("authorization") for s in local.seen] == [f"Bearer {SERVER_KEY}"] * 2


# ======================================================================================================================
# 2. Forwarding the caller's credentials
# ======================================================================================================================


def forwarding_config(**api: Any) -> Config:
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


def test_forwarding_targets_never_bind_the_servers_key() -> None:
    config = forwarding_config()
    assert bind_key(config, UPSTREAM_URL, None) is None
    plan = resolve(config, "m-forward", None, client_token=CLIENT_KEY)
    assert plan.api.forward_client_authorization and plan.api.key_env is None
    assert "critic" in plan.targets and not plan.target("critic").forward_client_authorization
    assert plan.target("critic").client_token is None  # the caller's token is kept only where it goes
    assert CLIENT_KEY not in repr(plan)


def test_fallbacks_bind_forwarding_to_their_own_url() -> None:
    primary = {"model": "a", "base_url": "http://primary.test/v1", "api_key_env": "PRIMARY_KEY"}
    primary["fallbacks"] = [
        {"model": "b", "base_url": "http://own-keys.test/v1", "forward_client_authorization": True},
        {"model": "c", "base_url": "http://backup.test/v1", "api_key_env": "BACKUP_KEY"},
    ]
    config = make_config(served_models={"m": {"mode": "direct", "api": primary}})
    plan = resolve(config, "m", None, client_token=CLIENT_KEY)
    assert (plan.api.key_env, plan.api.client_token) == ("PRIMARY_KEY", None)
    forwarding, backup = plan.api.fallbacks
    assert forwarding.forward_client_authorization and forwarding.client_token == CLIENT_KEY
    assert forwarding.key_env is None
    assert (backup.key_env, backup.client_token) == ("BACKUP_KEY", None)


def test_forwarding_and_inbound_auth_cannot_be_combined() -> None:
    data = {
        "auth_api_keys_env": KEYS_ENV,
        "served_models": {
            "m": {
                "mode": "direct",
                "api": {"model": "x", "base_url": "http://a.test", "forward_client_authorization": True},
            }
        },
    }
    with pytest.raises(ConfigError, match=r"served_models\.m\.api\.forward_client_authorization cannot be used"):
        Config.from_dict(data)


def test_inbound_keys_need_their_own_env_var() -> None:
    with pytest.raises(ConfigError, match="also holds an upstream API key"):
        make_config(auth_api_keys_env="OPENAI_API_KEY")


# ======================================================================================================================
# 3. Override hardening
# ======================================================================================================================

METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data",
    "http://169.254.169.254.",
    "http://169.254.0.1:8080/v1",
    "https://169.254.255.255/v1",
    "http://2852039166/",  # 169.254.169.254 as one decimal number
    "http://0xA9FEA9FE/",  # hex
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://0251.0376.0251.0376/",  # octal
    "http://169.254.43518/",  # a.b.c form
    "http://169.16689662/",  # a.b form
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64
    "http://[2002:a9fe:a9fe::1]/",  # 6to4
    "http://[fe80::1]/v1",
    "http://[fe80::1%25eth0]/v1",
    "http://[febf:ffff::1]/v1",
    "http://[fd00:ec2::254]/latest",
    "http://100.100.100.200/latest/meta-data",
    "http://metadata.google.internal/computeMetadata/v1",
    "http://METADATA.Google.Internal./computeMetadata/v1",
    "http://metadata%2Egoogle%2Einternal/computeMetadata/v1",
    "http://metadata\u3002google\u3002internal/",  # ideographic full stops, which IDNA maps to dots
    "http://metadata/computeMetadata/v1",
    "http://instance-data/latest",
]
REFUSED_URLS = [
    *METADATA_URLS,
    "ftp://upstream.example/v1",
    "file:///etc/passwd",
    "gopher://upstream.example/",
    "ws://upstream.example/v1",
    "http://user:pass@upstream.example/v1",
    "http://user@upstream.example/v1",
    "http://evil.example\\@169.254.169.254/",  # parsers disagree on such hosts; userinfo is refused outright
    "http://169.254.169.254\\@evil.example/",
    "http:///v1",
    "http://99999999999/",  # numeric, but no address
    "http://1.2.3.4.5/",
    "http://09.1.1.1/",
    "http://example.123/",
    "/v1",
    "not a url",
]
# Addresses of this machine and its networks, in the spellings a resolver accepts, with the reason given.
LOCAL_ADDRESS_URLS = [
    ("http://127.0.0.1:8000/v1", "loopback"),
    ("http://127.1/v1", "loopback"),
    ("http://2130706433/v1", "loopback"),  # 127.0.0.1 as one decimal number
    ("http://0x7f000001/v1", "loopback"),
    ("http://localhost./v1", "loopback"),
    ("http://LocalHost:8000/v1", "loopback"),
    ("http://api.localhost/v1", "loopback"),
    ("http://localhost.example/v1", None),  # a name: judged by the addresses it resolves to (see pinning)
    ("http://[::1]:8000/v1", "loopback"),
    ("http://[::ffff:127.0.0.1]/v1", "loopback"),  # IPv4-mapped
    ("http://[::ffff:7f00:1]/v1", "loopback"),
    ("http://[::127.0.0.1]/v1", "loopback"),  # IPv4-compatible
    ("http://[64:ff9b::7f00:1]/v1", "loopback"),  # NAT64
    ("http://[2002:7f00:1::1]/v1", "loopback"),  # 6to4
    ("http://0.0.0.0:8000/v1", "unspecified"),
    ("http://0/v1", "unspecified"),
    ("http://[::]/v1", "unspecified"),
    ("http://[::ffff:0.0.0.0]/v1", "unspecified"),
    ("http://10.0.0.5:8000/v1", "private"),
    ("http://172.16.0.1/v1", "private"),
    ("http://172.31.255.255/v1", "private"),
    ("http://192.168.1.1/v1", "private"),
    ("http://0xc0a80101/v1", "private"),
    ("http://[::ffff:10.1.2.3]/v1", "private"),
    ("http://[::ffff:c0a8:101]/v1", "private"),
    ("http://100.64.0.1/v1", "private"),
    ("http://[fc00::1]/v1", "private"),
    ("http://[fd12:3456::1]/v1", "private"),
    ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/v1", "private"),  # Teredo, client 10.0.0.1
    ("http://169.254.169.254/v1", "link-local"),
    ("http://[fe80::1%25eth0]/v1", "link-local"),
    ("http://[::ffff:169.254.169.254]/v1", "link-local"),
    ("http://224.0.0.1/v1", "multicast"),
    ("http://255.255.255.255/v1", "multicast"),
    ("http://[ff02::1]/v1", "multicast"),
]


@pytest.mark.parametrize(("url", "reason"), LOCAL_ADDRESS_URLS)
def test_star_never_reaches_this_machine_or_its_networks(url: str, reason: str | None) -> None:
    problem = override_url_problem(url)
    if reason is None:
        assert problem is None
        return
    assert problem is not None and reason in problem
    with pytest.raises(RequestError) as info:
        check_overrides(star_config(), Overrides(api_base_url=url))
    assert info.value.status_code == 400 and reason in info.value.message
    assert "list the URL explicitly" in info.value.message
    check_overrides(star_config(url), Overrides(api_base_url=url))  # listed explicitly: allowed
    check_overrides(make_config(allowed_override_base_urls=[url]), Overrides(api_base_url=url))


ALLOWED_URLS = [
    "http://upstream.example/v1",
    "https://api.openai.com/v1",
    "HTTPS://API.OPENAI.COM/v1",
    "http://8.8.8.8:8000/v1",
    "http://[2606:4700::1111]/v1",
    "http://[::ffff:8.8.8.8]/v1",
    "http://100.63.255.255/v1",
    "http://172.32.0.1/v1",
    "http://169.255.0.1/v1",
    "http://169.253.255.255/v1",
    "http://metadata.example.com/v1",
    "http://my-metadata/v1",
]


def star_config(*extra: str) -> Config:
    return make_config(allowed_override_base_urls=["*", *extra])


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_star_refuses_metadata_hosts_other_schemes_and_userinfo(url: str) -> None:
    with pytest.raises(Exception) as info:
        check_overrides(star_config(), Overrides(api_base_url=url))
    error = info.value
    assert getattr(error, "status_code", None) == 400, error
    assert getattr(error, "param", None) == "x_adapter_critic.api_base_url"
    assert ":pass@" not in str(error)  # credentials in the URL are not echoed


@pytest.mark.parametrize("url", ALLOWED_URLS)
def test_star_still_allows_ordinary_hosts(url: str) -> None:
    check_overrides(star_config(), Overrides(api_base_url=url, critic_base_url=url))


@pytest.mark.parametrize("url", METADATA_URLS[:4])
def test_metadata_hosts_can_be_listed_explicitly(url: str) -> None:
    check_overrides(star_config(url), Overrides(api_base_url=url))


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("example.com", None),
    ],
)
def test_ip_spellings(host: str, address: str | None) -> None:
    found = ip_of(host)
    assert (str(found) if found is not None else None) == address


async def test_refused_override_is_a_400_through_the_app(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(star_config()) as client:
        for url in ("http://169.254.169.254/v1", "http://u:sk-in-url-secret@up.example/v1"):
            response = await client.post(
                "/chat/completions", json=chat("m-direct", x_adapter_critic={"api_base_url": url})
            )
            error = envelope(response, 400)
            assert error["param"] == "x_adapter_critic.api_base_url"
            assert "sk-in-url-secret" not in response.text
    assert upstream.calls == []


def test_override_url_problem_names_the_reason() -> None:
    assert override_url_problem("http://169.254.169.254/") == "points at a link-local or cloud-metadata address"
    assert override_url_problem("http://metadata.google.internal/") == "points at a cloud-metadata host"
    assert override_url_problem("ftp://x/") == "does not use http or https"
    assert override_url_problem("http://a:b@x/") == "contains credentials (user:password@)"
    assert override_url_problem("https://api.openai.com/v1") is None


# URLs httpx parses but no upstream call can use: IDNA labels that do not decode, labels DNS refuses, no port.
INVALID_URLS = [
    "http://xn--/",
    "http://xn--a/",  # decodes to a code point IDNA does not allow
    "https://xn--ls8h.example/v1",  # an emoji: not allowed by IDNA 2008
    f"http://{'a' * 64}.com/v1",  # a label over 63 characters
    f"http://{'a.' * 127}com/v1",  # a name over 253 characters
    "http://a..b/v1",  # an empty label
    "http://.upstream.example/v1",
    "//xn--/v1",
    "http://upstream.example:65536/v1",
]
OVERRIDE_URL_FIELDS = ["api_base_url", "adapter_base_url", "critic_base_url"]


@pytest.mark.parametrize("allowlist", [[], ["*"], "listed"])
@pytest.mark.parametrize("url", INVALID_URLS)
def test_malformed_host_is_not_a_valid_url_whatever_the_allowlist(url: str, allowlist: list[str] | str) -> None:
    config = make_config(allowed_override_base_urls=[url] if allowlist == "listed" else allowlist)
    for field in OVERRIDE_URL_FIELDS:
        with pytest.raises(RequestError) as info:
            check_overrides(config, Overrides(**{field: url}))
        assert info.value.status_code == 400
        assert info.value.param == f"x_adapter_critic.{field}"
        assert info.value.message.endswith("is not a valid URL.")
    assert override_url_problem(url) == "is not a valid URL"


def test_valid_hosts_near_the_limits_are_allowed() -> None:
    for url in (f"http://{'a' * 63}.com/v1", f"http://{'a.' * 125}com/v1", "http://xn--bcher-kva.example./v1"):
        check_overrides(star_config(), Overrides(api_base_url=url))


@pytest.mark.parametrize("model", ["m-direct", "m-adapter", "m-critic"])
async def test_malformed_override_host_is_a_400_through_the_app(
    serve: AppFactory, upstream: ScriptedUpstream, model: str
) -> None:
    async with serve(star_config()) as client:
        for url in INVALID_URLS:
            for field in OVERRIDE_URL_FIELDS:
                overrides = {field: url, field.replace("base_url", "model"): "some-model"}
                response = await client.post("/chat/completions", json=chat(model, x_adapter_critic=overrides))
                error = envelope(response, 400)
                assert error["param"] == f"x_adapter_critic.{field}"
                assert "is not a valid URL" in error["message"]
    assert upstream.calls == []


# ======================================================================================================================
# 4. Limits
# ======================================================================================================================


async def test_max_messages(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    assert make_config().max_messages == 2048
    messages = [{"role": "user", "content": str(i)} for i in range(4)]
    async with serve(make_config(max_messages=3)) as client:
        refused = await client.post("/chat/completions", json={"model": "m-direct", "messages": messages})
        fine = await client.post("/chat/completions", json={"model": "m-direct", "messages": messages[:3]})
    error = envelope(refused, 400)
    assert error["param"] == "messages" and "max_messages" in error["message"]
    assert fine.status_code == 200
    assert len(upstream.calls) == 1


def test_limits_are_validated() -> None:
    for key in ("max_messages", "max_upstream_response_bytes"):
        with pytest.raises(ConfigError, match=key):
            make_config(**{key: 0})
    with pytest.raises(ConfigError, match="auth_api_keys_env"):
        make_config(auth_api_keys_env="")


def block(search: str, replace: str = "x") -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_edit_block_count_and_size_are_limited() -> None:
    draft = "\n".join(f"line {i}" for i in range(MAX_EDIT_BLOCKS + 1))
    fine = "".join(block(f"line {i}") for i in range(MAX_EDIT_BLOCKS))
    assert len(parse_edits(fine)) == MAX_EDIT_BLOCKS
    with pytest.raises(EditError, match="more than 100 edit blocks"):
        parse_edits(fine + block(f"line {MAX_EDIT_BLOCKS}"))
    with pytest.raises(EditError, match="edit block 1: the SEARCH text is longer than"):
        parse_edits(block("a" * (MAX_EDIT_BLOCK_CHARS + 1)))
    with pytest.raises(EditError, match="edit block 2: the REPLACE text is longer than"):
        review(draft, block("line 1") + block("line 2", "b" * (MAX_EDIT_BLOCK_CHARS + 1)))
    edits = parse_edits(fine)
    with pytest.raises(EditError, match="more than 100 edit blocks"):
        apply_edits(draft, [*edits, edits[0]])


def test_many_edits_on_a_huge_draft_are_refused_not_ground_through() -> None:
    huge = "\n".join(f"line {i} text" for i in range(1_000_000))  # 16 MB
    reply = "".join(block(f"line {999_900 + i} text") for i in range(50))
    # Refused up front by the work cap (the message says so), not after 50 scans of 16 MB.
    with pytest.raises(EditError, match="too many for a draft this long"):
        review(huge, reply)
    assert review(huge, block("line 999999 text", "last")).endswith("\nlast")


async def test_adapter_reply_over_the_limits_leaves_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "\n".join(f"line {i}" for i in range(200))
    upstream.script(Reply(draft), Reply("".join(block(f"line {i}") for i in range(MAX_EDIT_BLOCKS + 1))))
    async with serve() as client:
        response = await client.post("/chat/completions", json=chat("m-adapter"))
    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["message"]["content"] == draft
    assert "more than 100 edit blocks" in body["adapter_critic"]["intermediate"]["adapter_rejection_reason"]


async def endless(piece: bytes = b" " * 65536) -> AsyncIterator[bytes]:
    while True:
        yield piece
        await anyio.lowlevel.checkpoint()


async def test_endless_upstream_body_is_refused_not_buffered() -> None:
    sizes: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            # An event stream that never sends a line break: nothing to relay, nothing to end the line.
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=endless(b"data: x" * 9000)
            )
        return httpx.Response(200, headers={"content-type": "application/json"}, content=endless())

    config = make_config(max_upstream_response_bytes=1024 * 1024)
    async with hostile(config, handler) as client:
        for stream in (False, True):
            with anyio.fail_after(10):
                response = await client.post("/chat/completions", json=chat("m-direct", stream=stream))
            error = envelope(response, 502)
            sizes.append(error["message"])
            assert "max_upstream_response_bytes" in error["message"] and "api stage" in error["message"]


async def test_declared_oversized_upstream_body_is_refused_unread() -> None:
    reads = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal reads
        reads += 1
        yield json.dumps(completion()).encode()

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-length": str(10**9), "content-type": "application/json"}, content=body()
        )

    async with hostile(make_config(), handler) as client:
        error = envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)
    assert "max_upstream_response_bytes" in error["message"]
    assert reads == 0


async def test_upstream_body_within_the_limit_is_fine() -> None:
    content = "y" * 5000

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion(content))

    size = len(json.dumps(completion(content)))
    async with hostile(make_config(max_upstream_response_bytes=size + 10), handler) as client:
        response = await client.post("/chat/completions", json=chat("m-direct"))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == content


# -- request bodies through real uvicorn -------------------------------------------------------------------------------

UVICORN = ["-m", "uvicorn", "adapter_critic.asgi:app", "--log-level", "warning"]


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("limits") / "limits.toml"
    path.write_text(
        "max_body_bytes = 4096\n"
        '[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://127.0.0.1:9/v1" }\n'
    )
    with run_server(UVICORN, env={"ADAPTER_CRITIC_CONFIG": str(path)}) as (url, _):
        yield url


def raw_exchange(url: str, request: bytes) -> tuple[int, bytes]:
    """Send `request` as is and read one response; the socket timeout only guards against a hang."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=15) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        assert length is not None, head
        while len(body) < int(length.group(1)):
            chunk = sock.recv(65536)
            assert chunk
            body += chunk
    return int(head.split()[1]), body


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"


def test_chunked_body_over_the_limit_is_refused_before_it_ends(small_limit_server: str) -> None:
    # Two 3 KiB chunks and no terminating chunk: the body never ends, so only a server that counts while it
    # reads can answer — one that buffers the whole body first would wait forever.
    request = HEAD + b"transfer-encoding: chunked\r\n\r\n" + chunked(b" " * 3072, b" " * 3072)
    status, body = raw_exchange(small_limit_server, request)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_declared_length_over_the_limit_is_refused_before_any_body(small_limit_server: str) -> None:
    status, body = raw_exchange(small_limit_server, HEAD + b"content-length: 1000000000\r\n\r\n")
    assert status == 413
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


def test_chunked_body_within_the_limit_is_read_whole(small_limit_server: str) -> None:
    payload = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "x" * 3000}]}).encode()
    request = (
        HEAD
        + b"transfer-encoding: chunked\r\n\r\n"
        + chunked(*(payload[i : i + 700] for i in range(0, len(payload), 700)))
    )
    status, body = raw_exchange(small_limit_server, request + b"0\r\n\r\n")
    assert status == 404  # parsed whole: the served-model lookup ran
    assert json.loads(body)["error"]["code"] == "model_not_found"


# -- hostile request bodies --------------------------------------------------------------------------------------------


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (
            (
                '{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "tools": '
                + nested(100_000)
                + "}"
            ).encode(),
            "nested too deeply",
        ),
        (nested(5000).encode(), "nested too deeply"),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8"),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "seed": "\xc3"}', "not UTF-8"),
        (
            b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
            "not valid JSON",
        ),
        (
            b'{"model": "m-direct", "messages": [{"role": "user", "content": "x"}], "temperature": Infinity}',
            "not valid JSON",
        ),
        (b'{"model": "m-direct", "messages": [{"role": "user", "content": "\\ud800"}]}', "not valid JSON"),
    ],
)
async def test_hostile_bodies_are_400(serve: AppFactory, upstream: ScriptedUpstream, content: bytes, what: str) -> None:
    async with serve() as client:
        response = await client.post("/chat/completions", content=content)
    assert what in envelope(response, 400)["message"]
    assert upstream.calls == []


async def shallow_upstream(request: httpx.Request) -> httpx.Response:
    """An upstream that answers without parsing the request (a deep one would crash Python's `json`)."""
    if b'"stream":true' in request.content:
        return sse({"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]})
    return httpx.Response(200, json=completion("lgtm"))


@pytest.mark.parametrize("model", ["m-adapter", "m-critic"])
async def test_nesting_near_the_limit_never_fails_a_later_stage(model: str) -> None:
    """Values nested near msgspec's limit (the interpreter's recursion limit) are refused or carried through every
    stage — decoding and rendering the reviewer prompts must agree on what is too deep."""
    statuses = set()
    async with hostile(make_config(), shallow_upstream) as client:
        for depth in range(850, 1000, 5):
            deep = nested(depth)
            message = f'{{"role": "user", "content": [{deep}], "tool_calls": [{deep}]}}'
            for stream in ("false", "true"):
                messages = f'[{{"role": "user", "content": "hi"}}, {message}]'
                body = f'{{"model": "{model}", "messages": {messages}, "stream": {stream}}}'
                response = await client.post("/chat/completions", content=body.encode())
                statuses.add(response.status_code)
                if response.status_code == 400:
                    assert "nested too deeply" in response.text
                else:
                    assert response.status_code == 200, response.text
                    assert "server_error" not in response.text
    assert statuses == {200, 400}


def test_prompts_render_what_cannot_be_encoded_as_a_placeholder() -> None:
    """Rendering runs deeper in the stack than decoding: a value that decoded must still render, if only as a mark."""
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    message = Message(role="user", content=[deep], tool_calls=[deep])
    rendered = render_conversation([message])
    assert rendered.count("[nested too deeply to show]") == 2
    assert render_tool_calls([deep]) == "[nested too deeply to show]"


async def test_middleware_leaves_undecidable_bodies_to_the_wrapped_app() -> None:
    seen: list[int] = []

    async def local_chat(request: Request) -> JSONResponse:
        seen.append(len(await request.body()))
        return JSONResponse({"wrapped": True}, status_code=400)

    wrapped = Starlette(routes=[Route("/v1/chat/completions", local_chat, methods=["POST"])])

    content = ('{"model": "local-adapter", "messages": ' + nested(100_000) + "}").encode()
    async with client_for(AdapterCriticMiddleware(wrapped, config=local_config())) as client:
        response = await client.post("/v1/chat/completions", content=content)
    assert response.json() == {"wrapped": True}
    assert seen == [len(content)]


async def test_deeply_nested_upstream_answer_is_a_502() -> None:
    deep = json.loads(nested(900))

    async def handler(request: httpx.Request) -> httpx.Response:
        text = json.dumps(completion(tool_calls=[deep]))
        text = text.replace(json.dumps(deep), nested(50_000))
        return httpx.Response(200, content=text.encode(), headers={"content-type": "application/json"})

    async with hostile(make_config(), handler) as client:
        error = envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)
    assert "did not answer with an OpenAI chat completion" in error["message"]


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}',
        ('{"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": ' + nested(50_000) + "}]}").encode(),
    ],
)
async def test_hostile_stream_chunk_is_a_502(event: bytes) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        content = b"data: " + event + b"\n\ndata: [DONE]\n\n"
        return httpx.Response(200, content=content, headers={"content-type": "text/event-stream"})

    async with hostile(make_config(), handler) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", stream=True))
    assert "not a chat.completion.chunk" in envelope(response, 502)["message"]


async def test_invalid_utf8_upstream_answer_is_a_502() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(completion("@@")).encode().replace(b"@@", b"\xff\xfe"))

    async with hostile(make_config(), handler) as client:
        envelope(await client.post("/chat/completions", json=chat("m-direct")), 502)


# ======================================================================================================================
# 5. Redaction
# ======================================================================================================================

CANARY = "canary"
UP_KEY = "sk-SECRET/canary+123="  # `/`, `+` and `=` have escaped forms in JSON and in URLs
ADAPTER_KEY = "sk-adapter-canary-456"
INBOUND_CANARY = "inbound-canary-789"
FORWARDED = "sk-callers-own-canary-000"


def redaction_config(**top: Any) -> Config:
    def target(model: str, **extra: Any) -> dict[str, Any]:
        return {"model": model, "base_url": UPSTREAM_URL, **extra}

    served: dict[str, Any] = {
        name: {"mode": "direct", "api": target(name)}
        for name in (
            "relay4xx",
            "relay4xx-escaped",
            "plain4xx",
            "rate429",
            "fail500",
            "unreachable",
            "timeout",
            "badjson",
            "stream-error",
            "deep",
        )
    }
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


def sse(*events: dict[str, Any]) -> httpx.Response:
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return httpx.Response(200, content=data, headers={"content-type": "text/event-stream"})


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
        for model in (
            "relay4xx",
            "relay4xx-escaped",
            "plain4xx",
            "rate429",
            "fail500",
            "unreachable",
            "timeout",
            "badjson",
            "deep",
            "failing-critic",
        ):
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
        # The server's messages echo what the request said; a request that says a key gets `***` back.
        assert (await post(client, chat(UP_KEY))).status_code == 404
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
