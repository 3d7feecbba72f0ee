"""`POST /v1/messages/count_tokens` under `AdapterCriticMiddleware`, as on the app: a served model's count is the
middleware's (its API target's upstream counts: here the wrapped app's vLLM-shaped `/tokenize`, in-process), with
the `x-adapter-critic-token-count` header and the middleware's inbound keys; any other model's count is the wrapped
app's own, untouched."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from adapter_critic import AdapterCriticMiddleware

from ..conftest import INBOUND, KEYS_ENV, asgi_client, run_server, sdk
from ..middleware_app import LocalModel, local_config

QUESTION: list[Any] = [
    {"role": "user", "content": "Where is the Eiffel Tower?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "Sure?"},
]
HEADER = "x-adapter-critic-token-count"


def test_a_served_models_count_under_uvicorn_with_the_anthropic_sdk() -> None:
    with run_server(["-m", "uvicorn", "tests.middleware_app:app", "--log-level", "warning"]) as (base_url, _):
        client = sdk(anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0))
        served = client.messages.with_raw_response.count_tokens(model="local-adapter", messages=QUESTION)
        unserved = client.messages.with_raw_response.count_tokens(model="base", messages=QUESTION)
        calls = httpx.get(f"{base_url}/_calls").json()

    # The served model's API model (`base`, at `/v1` in-process) counted on the wrapped app's /tokenize.
    assert (served.parse().input_tokens, served.headers[HEADER]) == (30, "upstream")
    # Another model: the wrapped app's own endpoint answered, and nothing of the middleware's was added.
    assert unserved.parse().input_tokens == 42 and HEADER not in unserved.headers
    assert [(c["method"], c["path"], c["model"]) for c in calls] == [
        ("POST", "/tokenize", "base"),
        ("POST", "/v1/messages/count_tokens", "base"),
    ]


def anthropic_error(response: httpx.Response, status: int) -> str:
    """The error type of Anthropic's envelope answered with `status`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}, body
    kind: str = body["error"]["type"]
    return kind


@pytest.mark.anyio
async def test_a_served_models_count_needs_the_middlewares_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYS_ENV, INBOUND)
    local = LocalModel()
    app = AdapterCriticMiddleware(local.app, config=local_config(auth_api_keys_env=KEYS_ENV))
    body = {"model": "local-adapter", "messages": QUESTION}
    async with asgi_client(app) as client:
        refused = await client.post("/v1/messages/count_tokens", json=body)
        assert anthropic_error(refused, 401) == "authentication_error"
        assert local.seen == []
        counted = await client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": INBOUND})
        assert counted.status_code == 200 and counted.json() == {"input_tokens": 30}
        unknown = await client.post(
            "/v1/messages/count_tokens",
            json={"model": "local-adapter", "messages": "no"},
            headers={"x-api-key": INBOUND},
        )
        assert anthropic_error(unknown, 400) == "invalid_request_error"
        # Not the middleware's model: the wrapped app counts it, with its own auth.
        other = await client.post("/v1/messages/count_tokens", json={"model": "base", "messages": QUESTION})
        assert other.json() == {"input_tokens": 42}
