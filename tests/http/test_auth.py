"""Inbound auth (`auth_api_keys_env`): every route but the health check needs an accepted key, compared in constant
time, read afresh on each request and failing closed when none is configured — standalone, mounted or as middleware."""

from __future__ import annotations

import hmac
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from adapter_critic import AdapterCriticMiddleware, Config, create_app
from adapter_critic.http.auth import InboundAuth
from adapter_critic.service.keys import KeyRing

from ..conftest import INBOUND, KEYS_ENV, ROTATED, SERVER_KEY, UPSTREAM_URL, AppFactory, asgi_client, chat, make_config
from ..helpers import direct_toml, envelope
from ..middleware_app import LocalModel, local_config
from ..scripted_upstream import ScriptedUpstream

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("server_keys")]


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
    auth = InboundAuth(KeyRing(KEYS_ENV))
    for token, accepted in ((b"first-key-111", True), (b"third-key-333", True), (b"x", False), (b"a" * 500, False)):
        compared.clear()
        scope = {"type": "http", "headers": [(b"authorization", b"Bearer " + token)]}
        assert (auth.check(scope) is None) is accepted
        assert len(compared) == 3
        assert {len(a) for a, _ in compared} | {len(b) for _, b in compared} == {32}


async def test_standalone_app_needs_the_key_outside_v1_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter_critic.asgi import standalone_app

    path = tmp_path / "auth.toml"
    path.write_text(f'auth_api_keys_env = "{KEYS_ENV}"\n' + direct_toml(UPSTREAM_URL))
    monkeypatch.setenv("ADAPTER_CRITIC_CONFIG", str(path))
    key = {"authorization": f"Bearer {INBOUND}"}
    async with asgi_client(standalone_app()) as client:
        assert (await client.get("/v1/health")).status_code == 200
        for path_ in ("/v1/models", "/elsewhere", "/", "/v1"):
            assert envelope(await client.get(path_), 401)["type"] == "authentication_error"
        assert (await client.get("/v1/models", headers=key)).status_code == 200
        assert envelope(await client.get("/elsewhere", headers=key), 404)["type"] == "invalid_request_error"


async def test_mounted_app_keeps_health_public(upstream: ScriptedUpstream) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        api = create_app(auth_config(), http_client=network)
        parent = Starlette(routes=[Mount("/api/v1", app=api)])
        async with asgi_client(parent) as client:
            assert (await client.get("/api/v1/health")).status_code == 200
            assert (await client.get("/api/v1/models")).status_code == 401
            ok = await client.get("/api/v1/models", headers={"authorization": f"Bearer {INBOUND}"})
            assert ok.status_code == 200


async def test_middleware_asks_for_the_key_only_on_what_it_serves() -> None:
    local = LocalModel()
    app = AdapterCriticMiddleware(local.app, config=local_config(auth_api_keys_env=KEYS_ENV))
    async with asgi_client(app) as client:
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
