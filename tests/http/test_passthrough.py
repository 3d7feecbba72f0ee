"""The `passthrough` upstream: every other request under the mount relayed to one configured upstream,
streamed both ways, with the configured key for that upstream and never the client's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from adapter_critic import create_app

from ..conftest import UPSTREAM_URL, AppFactory, RemoteUpstream, asgi_client, make_config, run_app, sdk
from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio

PASS_KEY = "sk-passthrough-key-123456"


def passthrough_config(**top: Any) -> Any:
    return make_config(passthrough={"model": "-", "base_url": UPSTREAM_URL, "api_key_env": "PASS_KEY"}, **top)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASS_KEY", PASS_KEY)


async def test_other_paths_go_to_the_passthrough_with_its_own_key(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    async with serve(passthrough_config()) as client:
        response = await client.post(
            "/embeddings?dimensions=2",
            json={"model": "embedder", "input": ["a", "b"]},
            headers={"authorization": "Bearer sk-client-own", "x-custom": "kept"},
        )
    assert response.status_code == 200
    assert response.headers["x-upstream"] == "embeddings"  # the upstream's own headers come back
    assert [item["index"] for item in response.json()["data"]] == [0, 1]
    [call] = upstream.calls
    assert call.url == f"{UPSTREAM_URL}/embeddings?dimensions=2"
    assert call.headers["authorization"] == f"Bearer {PASS_KEY}"  # the configured key, never the client's
    assert call.headers["x-custom"] == "kept"
    assert call.body == {"model": "embedder", "input": ["a", "b"]}


async def test_models_merge_the_upstreams_with_the_served_ones(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(passthrough_config()) as client:
        listed = (await client.get("/models")).json()
        served = await client.get("/models/m-critic")
        relayed = await client.get("/models/upstream-model")
    assert [model["id"] for model in listed["data"]] == ["upstream-model", "m-direct", "m-adapter", "m-critic"]
    assert served.json()["owned_by"] == "adapter-critic"
    assert relayed.json() == {"id": "upstream-model", "object": "model", "created": 1, "owned_by": "upstream"}


async def test_without_a_passthrough_other_paths_are_404(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        response = await client.post("/embeddings", json={"model": "embedder", "input": "a"})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.calls == []


async def test_count_tokens_of_a_model_not_served_and_other_messages_paths_go_to_the_passthrough(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    question = [{"role": "user", "content": "Hi"}]
    async with serve(passthrough_config()) as client:
        served = await client.post("/messages/count_tokens", json={"model": "m-direct", "messages": question})
        relayed = await client.post("/messages/count_tokens", json={"model": "claude-x", "messages": question})
        other = await client.post("/messages/batches", json={})
    # The served model's API target (OpenAI-only) cannot count: estimated here; the others are the upstream's.
    assert served.headers["x-adapter-critic-token-count"] == "estimate"
    assert relayed.json() == {"input_tokens": 101} and "x-adapter-critic-token-count" not in relayed.headers
    assert (other.status_code, other.text) == (404, "Not Found")  # the upstream's own 404, relayed
    assert [call.url for call in upstream.calls] == [
        "http://upstream.test/tokenize",
        "http://upstream.test/tokenize",
        f"{UPSTREAM_URL}/messages/count_tokens",
    ]


async def test_a_body_over_the_limit_is_refused(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(passthrough_config(max_body_bytes=64)) as client:
        response = await client.post("/embeddings", json={"model": "embedder", "input": "x" * 100})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert upstream.calls == []


async def test_a_body_without_a_length_is_refused_once_it_passes_the_limit(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    async def body() -> AsyncIterator[bytes]:  # no content-length: counted while it is relayed
        yield b'{"model": "embedder", "input": "'
        yield b"x" * 100
        yield b'"}'

    async with serve(passthrough_config(max_body_bytes=64)) as client:
        response = await client.post("/embeddings", content=body())
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert upstream.calls == []


async def test_an_unreachable_passthrough_is_a_502_envelope() -> None:
    config = make_config(passthrough={"model": "-", "base_url": "http://127.0.0.1:9/v1"})
    async with asgi_client(create_app(config)) as client:
        response = await client.post("/embeddings", json={"input": "a"})
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "passthrough stage" in message and "could not connect to 127.0.0.1:9" in message


# -- end to end: real uvicorn, the official SDK, streaming ------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, upstream_url: str) -> Iterator[tuple[str, RemoteUpstream]]:
    path: Path = tmp_path_factory.mktemp("passthrough") / "config.toml"
    api = f'{{ model = "api-model", base_url = "{upstream_url}/v1" }}'
    toml = (
        f'[passthrough]\nmodel = "-"\nbase_url = "{upstream_url}/v1"\napi_key_env = "PASS_KEY"\n'
        f'[served_models.sidecar-critic]\nmode = "critic"\napi = {api}\n'
    )
    with run_app(path, toml, PASS_KEY=PASS_KEY) as (url, _):
        yield url, RemoteUpstream(upstream_url)


def test_the_sdk_uses_the_sidecar_as_its_only_base_url(served: tuple[str, RemoteUpstream]) -> None:
    url, upstream = served
    upstream.reset()
    client = sdk(openai.OpenAI(base_url=f"{url}/v1", api_key="sk-client-own", max_retries=0))

    embedding = client.embeddings.create(model="embedder", input=["one", "two"])
    assert [item.embedding for item in embedding.data] == [[0.5, 0.0], [0.5, 1.0]]
    pieces = [c.choices[0].text for c in client.completions.create(model="base", prompt="to be or not", stream=True)]
    assert "".join(pieces).split() == ["to", "be", "or", "not"] and len(pieces) == 5  # each event relayed
    assert [model.id for model in client.models.list()] == ["upstream-model", "sidecar-critic"]
    chat = client.chat.completions.create(model="sidecar-critic", messages=[{"role": "user", "content": "hi"}])
    assert chat.model == "sidecar-critic"  # served models still run their workflow

    relayed = [call for call in upstream.calls() if not call["path"].endswith("/chat/completions")]
    assert {call["headers"]["authorization"] for call in relayed} == {f"Bearer {PASS_KEY}"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, upstream_url: str) -> Iterator[tuple[str, RemoteUpstream]]:
    """A standalone server (over the aiohttp transport, as `pip install '.[server]'` has it) whose passthrough
    takes bodies of at most 1 KiB."""
    path: Path = tmp_path_factory.mktemp("passthrough") / "small.toml"
    toml = (
        f'max_body_bytes = 1024\n[passthrough]\nmodel = "-"\nbase_url = "{upstream_url}/v1"\n'
        f'[served_models.d]\nmode = "direct"\napi = {{ model = "m", base_url = "{upstream_url}/v1" }}\n'
    )
    with run_app(path, toml) as (url, _):
        yield url, RemoteUpstream(upstream_url)


@pytest.mark.parametrize("size", [2000, 100_000])
def test_a_body_without_a_length_over_the_limit_is_413_over_aiohttp_too(
    small: tuple[str, RemoteUpstream], size: int
) -> None:
    url, upstream = small
    upstream.reset()

    def body() -> Iterator[bytes]:  # no content-length: counted while it is relayed
        yield b'{"model": "embedder", "input": "'
        yield from (b"x" * 1000 for _ in range(size // 1000))
        yield b'"}'

    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/v1/embeddings", content=body(), headers={"content-type": "application/json"})
        assert "content-length" not in response.request.headers
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "request_too_large"
        # The server is still there, and a body within the limit still goes through.
        small_body = client.post("/v1/embeddings", json={"model": "embedder", "input": ["a"]})
    assert small_body.status_code == 200
