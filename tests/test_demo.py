"""The built-in demo served by `adapter_critic.asgi` when `ADAPTER_CRITIC_CONFIG` is unset (SPEC §1.3)."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from adapter_critic.demo import ADAPTER_EDIT, CRITIQUE, DEMO_MODEL, DRAFT_LEAD, REVISED_LEAD

from .conftest import chat

pytestmark = pytest.mark.anyio


@pytest.fixture
async def demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.delenv("ADAPTER_CRITIC_CONFIG", raising=False)
    asgi = importlib.import_module("adapter_critic.asgi")
    capsys.readouterr()
    caplog.clear()
    app = asgi.standalone_app()
    # Logged when logging is configured (as under pytest), else printed to stderr.
    said = capsys.readouterr().err + caplog.text
    assert "DEMO" in said
    assert "ADAPTER_CRITIC_CONFIG" in said
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client


async def ask(client: httpx.AsyncClient, model: str, content: str = "What is 2 + 2?") -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=chat(model, content))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["model"] == model
    return body


def answer(body: dict[str, Any]) -> str:
    content: str = body["choices"][0]["message"]["content"]
    return content


async def test_demo_lists_its_three_models(demo: httpx.AsyncClient) -> None:
    models = (await demo.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["demo-direct", "demo-adapter", "demo-critic"]


async def test_demo_direct_answers_with_the_demo_model(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-direct", "What  is\n2 + 2?")
    assert answer(body) == f'{DRAFT_LEAD}\nYou said: "What is 2 + 2?"'
    assert "not a real LLM" in answer(body)
    assert body["adapter_critic"]["mode"] == "direct"
    assert body["usage"]["total_tokens"] > 0


async def test_demo_adapter_edits_the_draft(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-adapter")
    ext = body["adapter_critic"]
    assert ext["mode"] == "adapter"
    assert ext["intermediate"]["api_draft"].startswith(DRAFT_LEAD)
    assert "SEARCH" in ext["intermediate"]["adapter"]
    assert answer(body).startswith(ADAPTER_EDIT)
    assert answer(body) != ext["intermediate"]["api_draft"]
    assert ext["intermediate"]["final"] == answer(body)
    assert "adapter_rejection_reason" not in ext["intermediate"]
    assert set(ext["tokens"]["stages"]) == {"api", "adapter"}


async def test_demo_critic_revises_the_draft(demo: httpx.AsyncClient) -> None:
    body = await ask(demo, "demo-critic")
    ext = body["adapter_critic"]
    assert ext["mode"] == "critic"
    assert ext["intermediate"]["api_draft"].startswith(DRAFT_LEAD)
    assert ext["intermediate"]["critic"] == CRITIQUE
    assert answer(body).startswith(REVISED_LEAD)
    assert 'You said: "What is 2 + 2?"' in answer(body)
    assert ext["intermediate"]["final"] == answer(body)
    assert set(ext["tokens"]["stages"]) == {"api_draft", "critic", "api_final"}


async def test_demo_is_plainly_named(demo: httpx.AsyncClient) -> None:
    assert "demo" in DEMO_MODEL
    for model in ("demo-direct", "demo-adapter", "demo-critic"):
        body = await ask(demo, model)
        assert "demo" in body["model"]
        assert answer(body).startswith("Demo model")
        assert "not a real LLM" in answer(body)
