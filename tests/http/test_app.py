"""The app's other endpoints and routing (SPEC §3), and `create_app` with a config file path."""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapter_critic import ConfigError, create_app
from adapter_critic.http.create import create_standalone_app

from ..conftest import UPSTREAM_URL, AppFactory, asgi_client, chat, make_config
from ..helpers import direct_toml, envelope
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio


async def test_models_lists_served_models(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    before = int(time.time())
    async with serve() as client:
        response = await client.get("/models")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"object", "data"}
    assert body["object"] == "list"
    assert [model["id"] for model in body["data"]] == ["m-direct", "m-adapter", "m-critic"]
    for model in body["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}
        assert model["object"] == "model"
        assert model["owned_by"] == "adapter-critic"
        assert isinstance(model["created"], int) and model["created"] <= int(time.time())
        assert model["created"] >= before - 5
    assert upstream.calls == []


async def test_models_follows_config(serve: AppFactory) -> None:
    cfg = make_config(served_models={"only-one": {"mode": "direct", "api": {"model": "a", "base_url": UPSTREAM_URL}}})
    async with serve(cfg) as client:
        body = (await client.get("/models")).json()
    assert [model["id"] for model in body["data"]] == ["only-one"]


async def test_a_served_model_is_retrieved_by_id(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        listed = (await client.get("/models")).json()["data"]
        one = await client.get("/models/m-critic")
        missing = await client.get("/models/gpt-nope")
    assert one.status_code == 200
    assert one.json() == next(model for model in listed if model["id"] == "m-critic")
    error = envelope(missing, 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert "m-critic" in error["message"]  # the served models are listed
    assert upstream.calls == []


async def test_cors_is_off_by_default(serve: AppFactory) -> None:
    async with serve() as client:
        response = await client.get("/models", headers={"origin": "https://chat.example"})
    assert "access-control-allow-origin" not in response.headers


async def test_cors_answers_a_browser_preflight_and_marks_answers(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    origin = "https://chat.example"
    preflight = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    async with serve(make_config(cors_allowed_origins=[origin])) as client:
        allowed = await client.options("/chat/completions", headers=preflight)
        refused = await client.options("/chat/completions", headers={**preflight, "origin": "https://evil.example"})
        answer = await client.post("/chat/completions", json=chat("m-direct"), headers={"origin": origin})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == origin
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == origin
    assert len(upstream.calls) == 1  # the preflights never reached the pipeline


async def test_a_preflight_needs_no_api_key_but_the_request_does(
    serve: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "sk-inbound-1234")
    origin = "https://chat.example"
    config = make_config(cors_allowed_origins=[origin], auth_api_keys_env="INBOUND_KEYS")
    preflight = {"origin": origin, "access-control-request-method": "POST"}
    async with serve(config) as client:
        allowed = await client.options("/chat/completions", headers=preflight)
        refused = await client.post("/chat/completions", json=chat("m-direct"), headers={"origin": origin})
    assert allowed.status_code == 200
    envelope(refused, 401)
    assert refused.headers["access-control-allow-origin"] == origin  # the browser may read the 401


async def test_health(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert upstream.calls == []


@pytest.mark.parametrize("path", ["/nope", "/v1/chat/completions", "/chat/completions/extra", "/model"])
async def test_unknown_path_is_404_envelope(serve: AppFactory, path: str) -> None:
    async with serve() as client:
        response = await client.get(path)
    error = envelope(response, 404)
    assert error["type"] == "invalid_request_error"
    assert path in error["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/chat/completions"), ("PUT", "/chat/completions"), ("POST", "/models"), ("DELETE", "/health")],
)
async def test_wrong_method_is_405_envelope(
    serve: AppFactory, upstream: ScriptedUpstream, method: str, path: str
) -> None:
    async with serve() as client:
        response = await client.request(method, path)
    error = envelope(response, 405)
    assert error["type"] == "invalid_request_error"
    assert method in error["message"]
    assert upstream.calls == []


@contextlib.asynccontextmanager
async def app_from(config: Any, upstream: ScriptedUpstream) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network:
        app = create_app(config, http_client=network)
        async with asgi_client(app) as client:
            yield client


TOML_CONFIG = f"""\
timeout_seconds = 30

[served_models.from-file]
mode = "critic"
api = {{ model = "file-api", base_url = "{UPSTREAM_URL}", options = {{ temperature = 0.25 }} }}
critic = {{ model = "file-critic", base_url = "{UPSTREAM_URL}" }}
critic_system_prompt = "From the file."
"""


@pytest.mark.parametrize("as_str", [False, True])
@pytest.mark.parametrize("suffix", [".toml", ".json"])
async def test_create_app_with_a_config_file_path(
    tmp_path: Path, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch, suffix: str, as_str: bool
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / f"config{suffix}"
    if suffix == ".toml":
        path.write_text(TOML_CONFIG)
    else:
        served = {
            "mode": "critic",
            "api": {"model": "file-api", "base_url": UPSTREAM_URL, "options": {"temperature": 0.25}},
            "critic": {"model": "file-critic", "base_url": UPSTREAM_URL},
            "critic_system_prompt": "From the file.",
        }
        path.write_text(json.dumps({"timeout_seconds": 30, "served_models": {"from-file": served}}))
    upstream.script(Reply("draft"), Reply("critique"), Reply("final"))

    async with app_from(str(path) if as_str else path, upstream) as client:
        models = (await client.get("/models")).json()
        response = await client.post("/chat/completions", json=chat("from-file"))

    assert [model["id"] for model in models["data"]] == ["from-file"]
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["model"] == "from-file"
    assert data["choices"][0]["message"]["content"] == "final"
    assert [call.model for call in upstream.calls] == ["file-api", "file-critic", "file-api"]
    assert upstream.calls[0].body["temperature"] == 0.25
    assert upstream.calls[1].messages[0] == {"role": "system", "content": "From the file."}


def test_create_app_refuses_relative_base_url(tmp_path: Path) -> None:
    path = tmp_path / "relative.toml"
    path.write_text(direct_toml("/v1", name="x", model="m"))
    with pytest.raises(ConfigError) as info:
        create_app(path)
    message = str(info.value)
    assert str(path) in message
    assert "served_models.x.api.base_url" in message
    assert "AdapterCriticMiddleware" in message


def test_create_app_with_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        create_app(path)


@pytest.fixture
def collector_settings() -> Iterator[None]:
    """Whatever a test's app does to the collector is undone after it."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector_settings")
async def test_only_the_standalone_server_tunes_the_garbage_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter_critic.asgi import standalone_app

    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    async with asgi_client(create_app(make_config())):
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0  # a host app's process: untouched
    async with asgi_client(create_standalone_app(make_config())):
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0  # the app alone: still a host's
    path = tmp_path / "standalone.toml"
    path.write_text(direct_toml(UPSTREAM_URL))
    monkeypatch.setenv("ADAPTER_CRITIC_CONFIG", str(path))
    async with asgi_client(standalone_app()):  # `uvicorn adapter_critic.asgi:app`
        assert gc.get_threshold()[0] == 10_000
        assert gc.get_freeze_count() > 0  # the start-up heap is out of the collector's walks


def test_the_standalone_server_fixes_the_c_allocators_thresholds() -> None:
    # glibc (this suite's platform): blocks up to 32 MiB reused from the heap, not mapped afresh (asgi.py).
    import platform

    from adapter_critic.asgi import tune_allocator

    assert tune_allocator() is (platform.libc_ver()[0] == "glibc")
