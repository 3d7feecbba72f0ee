"""Staying up when upstreams fail: retries with backoff, fallback targets, degradation, the request deadline,
overload, graceful shutdown and the deep health check — in-process, against the scripted upstream.

Network faults the scripted upstream cannot produce in-process (a connection reset or refusal) are raised by
`Faults`, a transport in front of it. Backoff waits are recorded instead of slept (`waits`), so attempt counts
and the waits asked for are asserted, never timings. Requests are held in flight with an `anyio.Event` gate.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from adapter_critic import AdapterCriticMiddleware, Config, ConfigError, create_app
from adapter_critic.demo import demo_config, demo_model_app
from adapter_critic.events import RunRecord, extension
from adapter_critic.http.app import build_app
from adapter_critic.protocols.openai.render import encode
from adapter_critic.service.compose import Service, compose
from adapter_critic.upstream.retry import Sleep
from adapter_critic.upstream.transport import AiohttpTransport

from ..conftest import OTHER_URL, UPSTREAM_URL, asgi_client, chat, make_config
from ..helpers import envelope, target
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

THIRD_URL = "http://third.test/v1"
DRAFT = "The Eiffel Tower is in Paris."

# One scripted reply per failure kind an upstream shows in production.
HTTP_429 = Reply(status=429, body='{"error": {"message": "slow down"}}')
HTTP_500 = Reply(status=500, body='{"error": {"message": "boom"}}')
HTTP_503 = Reply(status=503, body='{"error": {"message": "overloaded"}}', headers={"retry-after": "1"})
TRUNCATED_JSON = Reply(body='{"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "cont')
HTML_ERROR_PAGE = Reply(status=502, body="<html><h1>502 Bad Gateway</h1></html>", headers={"content-type": "text/html"})
EMPTY_CHOICES = Reply(body='{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}')
WRONG_CONTENT_TYPE = Reply(body="the model is warming up", headers={"content-type": "text/plain"})


def config(served_models: dict[str, Any] | None = None, **top: Any) -> Config:
    """Retries on (the default 2) with a backoff too small to matter; `make_config`'s served models by default."""
    settings: dict[str, Any] = {"retries": 2, "retry_backoff_seconds": 0.001, **top}
    if served_models is not None:
        settings["served_models"] = served_models
    return make_config(**settings)


def fallback_models(**api_extra: Any) -> dict[str, Any]:
    """`m-direct` and `m-critic` whose api target falls back to `fallback-model` at OTHER_URL."""
    api = target("api-model", fallbacks=[target("fallback-model", OTHER_URL)], **api_extra)
    return {
        "m-direct": {"mode": "direct", "api": api},
        "m-critic": {"mode": "critic", "api": api, "critic": target("critic-model")},
    }


class Faults(httpx.AsyncBaseTransport):
    """Calls go to `app` in-process, except that each queued exception is raised for one call instead (a reset,
    a refused connection); `requests` records every call made, faulted ones included."""

    def __init__(self, app: ASGIApp) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.queue: deque[Exception] = deque()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.queue:
            raise self.queue.popleft()
        return await self.inner.handle_async_request(request)


class Gate:
    """ASGI wrapper holding every call until `release()`; `entered` counts the calls waiting or through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.opened = anyio.Event()
        self.entered = 0
        self.arrived = anyio.Event()

    def release(self) -> None:
        self.opened.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.entered += 1
        self.arrived.set()
        await self.opened.wait()
        await self.app(scope, receive, send)


_asked: list[float] = []


async def record_wait(seconds: float) -> None:
    """The retry sleeper of the apps under test: it records each backoff wait and sleeps none."""
    _asked.append(seconds)
    await anyio.lowlevel.checkpoint()


@pytest.fixture(autouse=True)
def waits() -> list[float]:
    """Every backoff wait asked for, in order."""
    _asked.clear()
    return _asked


@contextlib.asynccontextmanager
async def running(
    app_config: Config, upstream_app: ASGIApp | httpx.AsyncBaseTransport, sleep: Sleep = record_wait
) -> AsyncIterator[Any]:
    """The app under test with its lifespan running; yields (client, app). Upstream calls go to `upstream_app`."""
    given = isinstance(upstream_app, httpx.AsyncBaseTransport)
    transport = upstream_app if given else httpx.ASGITransport(upstream_app)
    async with httpx.AsyncClient(transport=transport) as upstream_client:
        app = create_app(app_config, http_client=upstream_client, sleep=sleep)
        async with asgi_client(app) as client:
            yield client, app


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/chat/completions", json=body)


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def stream_chunks(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON chunks of a complete SSE answer (asserting it ended with [DONE])."""
    assert response.status_code == 200, response.text
    events = [e for e in response.text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]", events[-1]
    return [json.loads(e[len("data: ") :]) for e in events[:-1]]


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def label(model: str, base_url: str = UPSTREAM_URL) -> str:
    return f"{model}@{base_url}"


# -- one failure kind at a time: retried, then success / a fallback / degraded / an error ----------------------------


async def test_reset_is_retried_then_succeeds(upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture) -> None:
    faults = Faults(upstream.app)
    faults.queue.append(httpx.ReadError("[Errno 104] Connection reset by peer"))
    caplog.set_level(logging.WARNING, logger="adapter_critic")
    async with running(config(), faults) as (client, _):
        data = ok(await post(client, chat("m-direct")))

    assert data["choices"][0]["message"]["content"] == "echo api-model: Hello"
    assert len(faults.requests) == 2 and len(upstream.calls) == 1
    assert data["adapter_critic"]["targets"] == {"api": label("api-model")}
    # Each retry is logged with the stage, the attempt and the reason.
    [retry] = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert "api stage" in retry and "attempt 1 of 3" in retry and "upstream.test:80 broke (connection reset)" in retry


async def test_timeout_exhausts_the_target_then_its_fallback_answers(upstream: ScriptedUpstream) -> None:
    models = fallback_models(timeout_seconds=0.05, retries=1)  # a per-target timeout and retry count
    upstream.script(Reply("too late", delay=60, model="api-model"), Reply("too late", delay=60, model="api-model"))
    async with running(config(models), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-direct")))

    assert data["choices"][0]["message"]["content"] == "echo fallback-model: Hello"
    assert [c.model for c in upstream.calls] == ["api-model", "api-model", "fallback-model"]
    assert len(upstream.aborted) == 2  # both slow calls were cancelled, not left running
    assert data["adapter_critic"]["targets"] == {"api": label("fallback-model", OTHER_URL)}


async def test_429_with_retry_after_is_waited_out_then_succeeds(upstream: ScriptedUpstream, waits: list[float]) -> None:
    upstream.script(Reply(status=429, body="{}", headers={"retry-after": "2"}))
    async with running(config(), upstream.app) as (client, _):
        ok(await post(client, chat("m-direct")))

    assert len(upstream.calls) == 2
    assert waits == [2.0]  # the upstream's Retry-After, not the (tiny) backoff


async def test_429_without_retry_after_exhausted_says_when_to_come_back(
    upstream: ScriptedUpstream, waits: list[float]
) -> None:
    upstream.script(HTTP_429, HTTP_429, HTTP_429)
    app_config = config(retry_backoff_seconds=1.5, retry_backoff_max_seconds=10)
    async with running(app_config, upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    error = envelope(response, 429)
    assert error["type"] == "rate_limit_error"
    assert len(upstream.calls) == 3 and len(waits) == 2
    # The upstream gave no Retry-After: the client gets the backoff this server would wait next (1.5 * 2**2 s).
    assert response.headers["retry-after"] == "6"
    assert "x-should-retry" not in response.headers


async def test_429_asking_longer_than_the_cap_is_relayed_at_once(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=429, body="{}", headers={"retry-after": "60"}))
    async with running(config(retry_backoff_max_seconds=5), upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    envelope(response, 429)
    assert len(upstream.calls) == 1  # not worth holding the request for a minute
    assert response.headers["retry-after"] == "60"  # ...but worth the client's wait: no x-should-retry: false
    assert "x-should-retry" not in response.headers


async def test_500_on_the_critic_is_retried_then_degrades_to_the_draft(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), HTTP_500, HTTP_500, HTTP_500)
    async with running(config(), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-critic")))

    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == DRAFT
    assert ext["degraded"] is True
    assert "critic stage" in ext["intermediate"]["critic_error"] and "500" in ext["intermediate"]["critic_error"]
    assert "critic" not in ext["intermediate"] and ext["intermediate"]["final"] == DRAFT
    assert list(ext["tokens"]["stages"]) == ["api_draft", "critic"]
    assert ext["targets"] == {"api_draft": label("api-model")}
    assert [c.model for c in upstream.calls] == ["api-model", "critic-model", "critic-model", "critic-model"]


async def test_503_is_retried_honouring_its_retry_after(upstream: ScriptedUpstream, waits: list[float]) -> None:
    upstream.script(HTTP_503)
    async with running(config(), upstream.app) as (client, _):
        ok(await post(client, chat("m-direct")))

    assert len(upstream.calls) == 2 and waits == [1.0]


async def test_truncated_json_is_retried_then_succeeds(upstream: ScriptedUpstream) -> None:
    upstream.script(TRUNCATED_JSON)
    async with running(config(), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-direct")))

    assert data["choices"][0]["message"]["content"] == "echo api-model: Hello"
    assert len(upstream.calls) == 2


async def test_html_error_page_exhausted_is_a_502_the_sdk_must_not_retry(upstream: ScriptedUpstream) -> None:
    upstream.script(HTML_ERROR_PAGE, HTML_ERROR_PAGE, HTML_ERROR_PAGE)
    async with running(config(), upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    error = envelope(response, 502)
    assert error["type"] == "upstream_error" and "api stage" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert len(upstream.calls) == 3


async def test_empty_choices_exhaust_the_target_then_its_fallback_answers(upstream: ScriptedUpstream) -> None:
    upstream.script(*[Reply(body=EMPTY_CHOICES.body, model="api-model") for _ in range(3)])
    async with running(config(fallback_models()), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-critic")))

    ext = data["adapter_critic"]
    assert ext["intermediate"]["api_draft"] == "echo fallback-model: Hello"
    assert ext["targets"] == {
        "api_draft": label("fallback-model", OTHER_URL),
        "critic": label("critic-model"),
        "api_final": label("api-model"),  # the next stage starts on its primary again
    }
    assert [c.model for c in upstream.calls][:4] == ["api-model"] * 3 + ["fallback-model"]


async def test_wrong_content_type_on_the_adapter_is_retried_then_degrades(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), WRONG_CONTENT_TYPE, WRONG_CONTENT_TYPE, WRONG_CONTENT_TYPE)
    async with running(config(), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-adapter")))

    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == DRAFT
    assert ext["degraded"] is True and "chat completion" in ext["intermediate"]["adapter_error"]
    assert "adapter" not in ext["intermediate"]
    assert len(upstream.calls) == 4


async def test_a_refused_connection_everywhere_ends_in_a_502(upstream: ScriptedUpstream) -> None:
    faults = Faults(upstream.app)
    faults.queue.extend(httpx.ConnectError("[Errno 111] Connection refused") for _ in range(6))
    async with running(config(fallback_models()), faults) as (client, _):
        response = await post(client, chat("m-direct"))

    error = envelope(response, 502)
    assert "could not be reached" in error["message"] and "fallback-model" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert [r.url.host for r in faults.requests] == ["upstream.test"] * 3 + ["other.test"] * 3


async def test_other_4xx_is_neither_retried_nor_fallen_back(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=400, body='{"error": {"message": "context too long", "type": "invalid_request"}}'))
    async with running(config(fallback_models()), upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "context too long"  # the upstream's own envelope, relayed
    assert len(upstream.calls) == 1


async def test_backoff_is_exponential_with_jitter(upstream: ScriptedUpstream, waits: list[float]) -> None:
    upstream.script(HTTP_500, HTTP_500, HTTP_500, HTTP_500)
    app_config = config(retries=3, retry_backoff_seconds=1.0, retry_backoff_max_seconds=3.0)
    async with running(app_config, upstream.app) as (client, _):
        envelope(await post(client, chat("m-direct")), 502)

    assert len(upstream.calls) == 4 and len(waits) == 3
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0 and 1.5 <= waits[2] <= 3.0  # the third at the cap


# -- fallback targets: their own credentials and body -----------------------------------------------------------------


async def test_fallback_credentials_are_bound_to_the_fallbacks_own_url(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIMARY_KEY", "sk-primary-secret")
    monkeypatch.setenv("FALLBACK_KEY", "sk-fallback-secret")
    monkeypatch.setenv("DEFAULT_KEY", "sk-default-secret")
    api = target(
        "api-model",
        api_key_env="PRIMARY_KEY",
        options={"temperature": 0.7, "top_p": 0.5},
        retries=0,
        fallbacks=[
            target("fallback-model", OTHER_URL, api_key_env="FALLBACK_KEY", options={"temperature": 0}, retries=0),
            target("third-model", THIRD_URL),  # names no key: the default key, sent only to its own URL
        ],
    )
    models = {"m-direct": {"mode": "direct", "api": api}}
    upstream.script(HTTP_500, Reply(status=503, body="{}", model="fallback-model"))
    async with running(config(models, default_api_key_env="DEFAULT_KEY"), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-direct", max_tokens=5)))

    primary, fallback, third = upstream.calls
    assert (primary.host, primary.headers["authorization"]) == ("upstream.test", "Bearer sk-primary-secret")
    assert (fallback.host, fallback.headers["authorization"]) == ("other.test", "Bearer sk-fallback-secret")
    assert (third.host, third.headers["authorization"]) == ("third.test", "Bearer sk-default-secret")
    # Each fallback gets its own model and options, under the request's own fields (as the primary does).
    assert primary.body["top_p"] == 0.5 and primary.body["temperature"] == 0.7
    assert fallback.body["model"] == "fallback-model" and fallback.body["temperature"] == 0
    assert "top_p" not in fallback.body and fallback.body["max_tokens"] == 5
    assert data["adapter_critic"]["targets"] == {"api": label("third-model", THIRD_URL)}


async def test_a_fallbacks_key_is_redacted_like_any_configured_key(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FALLBACK_KEY", "sk-fallback-secret")
    api = target("api-model", retries=0, fallbacks=[target("fallback-model", OTHER_URL, api_key_env="FALLBACK_KEY")])
    leaked = '{"error": {"message": "bad key sk-fallback-secret", "type": "invalid_request_error"}}'
    upstream.script(HTTP_500, Reply(status=401, body=leaked))
    async with running(config({"m-direct": {"mode": "direct", "api": api}}), upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    assert response.status_code == 401
    assert "sk-fallback-secret" not in response.text and "***" in response.text


def test_fallbacks_cannot_nest() -> None:
    nested = target("a", fallbacks=[target("b", OTHER_URL, fallbacks=[target("c", THIRD_URL)])])
    with pytest.raises(ConfigError, match=r"served_models\.m\.api.*fallbacks"):
        Config.from_dict({"served_models": {"m": {"mode": "direct", "api": nested}}})


def test_a_relative_fallback_url_is_refused_outside_the_middleware() -> None:
    api = target("a", fallbacks=[target("b", "/v1")])
    with pytest.raises(ConfigError, match=r"served_models\.m\.api\.fallbacks\[0\]\.base_url"):
        create_app(Config.from_dict({"served_models": {"m": {"mode": "direct", "api": api}}}))


def test_an_empty_targets_map_is_left_out_of_the_extension() -> None:
    assert b'"targets"' not in encode(extension(RunRecord("run", "m", "direct")))


# -- timeouts: per target, and the request deadline --------------------------------------------------------------------


async def test_timeouts_per_target_with_a_separate_connect_timeout() -> None:
    seen: list[dict[str, float]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json={"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]})

    models = {
        "m-direct": {"mode": "direct", "api": target("a", timeout_seconds=7, connect_timeout_seconds=2)},
        "m-other": {"mode": "direct", "api": target("b", OTHER_URL)},
    }
    app_config = config(models, timeout_seconds=30, connect_timeout_seconds=4)
    async with running(app_config, httpx.MockTransport(answer)) as (client, _):
        ok(await post(client, chat("m-direct")))
        ok(await post(client, chat("m-other")))

    assert (seen[0]["read"], seen[0]["connect"]) == (7, 2)
    assert (seen[1]["read"], seen[1]["connect"]) == (30, 4)


async def test_request_deadline_on_the_first_call_is_a_504(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply("late", delay=10))
    async with running(config(request_timeout_seconds=0.2), upstream.app) as (client, _):
        response = await post(client, chat("m-direct"))

    error = envelope(response, 504)
    assert error["code"] == "upstream_timeout" and "request_timeout_seconds" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert len(upstream.aborted) == 1  # the in-flight call was cancelled


async def test_request_deadline_on_a_reviewer_answers_with_the_draft(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), Reply("late critique", delay=10))
    async with running(config(request_timeout_seconds=0.3), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-critic")))

    ext = data["adapter_critic"]
    assert data["choices"][0]["message"]["content"] == DRAFT and ext["degraded"] is True
    assert "request_timeout_seconds" in ext["intermediate"]["critic_error"]
    assert list(ext["timings_ms"]) == ["api_draft", "critic", "total"]  # api_final never ran
    assert len(upstream.aborted) == 1


async def test_request_deadline_on_a_reviewer_with_fail_is_a_504(upstream: ScriptedUpstream) -> None:
    models = {"m-critic": {"mode": "critic", "api": target("api-model"), "on_review_error": "fail"}}
    upstream.script(Reply(DRAFT), Reply("late critique", delay=10))
    async with running(config(models, request_timeout_seconds=0.3), upstream.app) as (client, _):
        response = await post(client, chat("m-critic"))

    assert "critic stage" in envelope(response, 504)["message"]


async def test_request_deadline_cuts_backoff_waits_too(upstream: ScriptedUpstream) -> None:
    upstream.script(HTTP_500)
    app_config = config(request_timeout_seconds=0.2, retry_backoff_seconds=60, retry_backoff_max_seconds=60)
    # Really waiting: a long backoff the deadline must cut short.
    async with running(app_config, upstream.app, sleep=anyio.sleep) as (client, _):
        response = await post(client, chat("m-direct"))

    envelope(response, 504)
    assert len(upstream.calls) == 1


# -- overload ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("queue_timeout", [0, 0.05])
async def test_requests_beyond_the_limit_get_503_with_retry_after(
    upstream: ScriptedUpstream, queue_timeout: float
) -> None:
    gate = Gate(upstream.app)
    app_config = config(max_concurrent_requests=1, queue_timeout_seconds=queue_timeout)
    async with running(app_config, gate) as (client, _), anyio.create_task_group() as tg:
        first: list[httpx.Response] = []

        async def ask() -> None:
            first.append(await post(client, chat("m-direct")))

        tg.start_soon(ask)
        await gate.arrived.wait()  # the first request holds the only slot
        try:
            with anyio.fail_after(10):  # a safety net: without the limit, this request would wait at the gate
                refused = await post(client, chat("m-direct"))
            health = await client.get("/health")  # not a chat request: never queued
        finally:
            gate.release()

    error = envelope(refused, 503)
    assert error["type"] == "server_error" and error["code"] == "overloaded"
    assert refused.headers["retry-after"] == "1"
    assert "x-should-retry" not in refused.headers  # it never ran: retrying it is safe
    assert health.status_code == 200
    assert ok(first[0]) and len(upstream.calls) == 1


async def test_requests_wait_in_the_queue_for_a_free_slot(upstream: ScriptedUpstream) -> None:
    gate = Gate(upstream.app)
    app_config = config(max_concurrent_requests=1, queue_timeout_seconds=30)
    responses: list[httpx.Response] = []
    async with running(app_config, gate) as (client, _):

        async def ask() -> None:
            responses.append(await post(client, chat("m-direct")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await gate.arrived.wait()
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            entered = gate.entered
            gate.release()
    assert entered == 1  # the second request was queued, not at the upstream

    assert [r.status_code for r in responses] == [200, 200]
    assert gate.entered == 2


async def test_a_request_beyond_the_queue_length_gets_503_at_once(upstream: ScriptedUpstream) -> None:
    """One slot, two places in the queue: the fourth request is refused at once, not after queue_timeout_seconds."""
    gate = Gate(upstream.app)
    app_config = config(max_concurrent_requests=1, max_queued_requests=2, queue_timeout_seconds=60)
    responses: list[httpx.Response] = []
    async with running(app_config, gate) as (client, app):
        admission = app.state.adapter_critic.admission

        async def ask() -> None:
            responses.append(await post(client, chat("m-direct")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await gate.arrived.wait()  # the first request holds the only slot
            tg.start_soon(ask)
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            queued = admission.queued
            try:
                with anyio.fail_after(10):  # a safety net: without the bound, it would wait 60 s for a slot
                    refused = await post(client, chat("m-direct"))
            finally:
                gate.release()

    assert queued == 2
    error = envelope(refused, 503)
    assert error["code"] == "overloaded" and "max_queued_requests" in error["message"]
    assert refused.headers["retry-after"] == "60"
    assert [r.status_code for r in responses] == [200, 200, 200]  # the queued ones ran once the slot was free
    assert admission.queued == 0 and gate.entered == 3


@pytest.mark.parametrize("queue_timeout", [0, 30])
async def test_no_queue_refuses_at_once(upstream: ScriptedUpstream, queue_timeout: float) -> None:
    gate = Gate(upstream.app)
    app_config = config(max_concurrent_requests=1, max_queued_requests=0, queue_timeout_seconds=queue_timeout)
    async with running(app_config, gate) as (client, _), anyio.create_task_group() as tg:
        tg.start_soon(post, client, chat("m-direct"))
        await gate.arrived.wait()
        try:
            with anyio.fail_after(10):
                refused = await post(client, chat("m-direct"))
        finally:
            gate.release()
    assert envelope(refused, 503)["code"] == "overloaded"


async def test_upstream_pool_size_is_configurable() -> None:
    app = create_app(config(max_upstream_connections=7))
    service: Service = app.state.adapter_critic
    async with LifespanManager(app):
        client = service.upstream._client
        assert client is not None
        transport: Any = client._transport
        if isinstance(transport, AiohttpTransport):
            assert transport._inner.limits.max_connections == 7
        else:
            assert transport._pool._max_connections == 7


# -- shutdown ----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def one_app(app_config: Config, gate: Gate) -> Iterator[tuple[Any, Service]]:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(gate))
    app = create_app(app_config, http_client=client)
    yield app, app.state.adapter_critic


async def test_shutdown_lets_requests_in_flight_finish_then_closes(upstream: ScriptedUpstream) -> None:
    gate = Gate(upstream.app)
    with one_app(config(shutdown_grace_seconds=60), gate) as (app, service):
        manager = LifespanManager(app)
        await manager.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://testserver")
        answered: list[httpx.Response] = []
        shut = anyio.Event()

        async def ask() -> None:
            answered.append(await post(client, chat("m-direct")))

        async def shutdown() -> None:
            await manager.__aexit__(None, None, None)
            shut.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await gate.arrived.wait()
            tg.start_soon(shutdown)
            try:
                await anyio.wait_all_tasks_blocked()
                assert not shut.is_set() and service.upstream.is_open  # shutdown waits for the request
                with anyio.fail_after(10):
                    late = await post(client, chat("m-direct"))  # while draining, nothing new is admitted
            finally:
                gate.release()
        await client.aclose()

    assert ok(answered[0])["choices"][0]["message"]["content"] == "echo api-model: Hello"
    assert envelope(late, 503)["message"].startswith("The server is shutting down")
    assert shut.is_set() and not service.upstream.is_open


async def test_shutdown_grace_is_bounded(upstream: ScriptedUpstream) -> None:
    gate = Gate(upstream.app)
    with one_app(config(shutdown_grace_seconds=0), gate) as (app, service):
        manager = LifespanManager(app)
        await manager.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://testserver")
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, client, chat("m-direct"))
            await gate.arrived.wait()
            try:
                with anyio.fail_after(10):
                    await manager.__aexit__(None, None, None)  # returns although the request is still held
                assert not service.upstream.is_open
            finally:
                gate.release()
        await client.aclose()


async def test_middleware_drains_before_the_wrapped_app_shuts_down() -> None:
    """Stages served in-process by the wrapped app need it up until the requests in flight are done."""
    arrived, released = anyio.Event(), anyio.Event()
    stopped: list[str] = []

    async def local_chat(request: Request) -> JSONResponse:
        arrived.set()
        await released.wait()
        return JSONResponse(
            {"choices": [{"message": {"role": "assistant", "content": "local"}, "finish_reason": "stop"}]}
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        stopped.append("wrapped app")

    local = Starlette(routes=[Route("/local/v1/chat/completions", local_chat, methods=["POST"])], lifespan=lifespan)
    api = target("local-model", "/local/v1")
    app = AdapterCriticMiddleware(
        local, config=Config.from_dict({"served_models": {"m": {"mode": "direct", "api": api}}})
    )
    manager = LifespanManager(app)
    await manager.__aenter__()
    answered: list[httpx.Response] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:

        async def ask() -> None:
            answered.append(await client.post("/v1/chat/completions", json=chat("m")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await arrived.wait()
            tg.start_soon(manager.__aexit__, None, None, None)
            await anyio.wait_all_tasks_blocked()
            stopped_early = list(stopped)
            released.set()
    assert stopped_early == []  # the wrapped app kept serving the stage in flight

    assert ok(answered[0])["choices"][0]["message"]["content"] == "local"
    assert stopped == ["wrapped app"]


# -- streaming ---------------------------------------------------------------------------------------------------------


async def test_streaming_retries_before_the_first_byte(upstream: ScriptedUpstream) -> None:
    upstream.script(HTTP_503, Reply(status=502, body="{}"))
    async with running(config(), upstream.app) as (client, _):
        response = await post(client, chat("m-direct", stream=True))

    chunks = stream_chunks(response)
    assert streamed_text(chunks) == "echo api-model: Hello"
    assert chunks[-1]["adapter_critic"]["targets"] == {"api": label("api-model")}
    assert len(upstream.calls) == 3


async def test_streaming_falls_back_when_a_stream_breaks_before_any_answer(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), *[Reply("cut", stream_break_after=1, model="api-model") for _ in range(3)])
    async with running(config(fallback_models()), upstream.app) as (client, _):
        response = await post(client, chat("m-critic", stream=True))

    chunks = stream_chunks(response)  # only the role chunk had come, and it was held back: nothing relayed
    assert streamed_text(chunks).startswith("echo fallback-model: A reviewer read your previous reply")
    assert chunks[-1]["adapter_critic"]["targets"]["api_final"] == label("fallback-model", OTHER_URL)


async def test_streaming_never_retries_after_bytes_were_relayed(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT, stream_break_after=3))  # role + two pieces of content, then the stream ends
    async with running(config(), upstream.app) as (client, _):
        response = await post(client, chat("m-direct", stream=True))

    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e.startswith("data: ")]
    assert "data: [DONE]" not in events
    assert json.loads(events[-1][len("data: ") :])["error"]["type"] == "upstream_error"
    assert len(upstream.calls) == 1  # a second attempt would repeat text the client already has


async def test_streaming_reviewer_failing_still_streams_the_draft(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), HTTP_500, HTTP_500, HTTP_500)
    async with running(config(), upstream.app) as (client, _):
        response = await post(client, chat("m-critic", stream=True))

    chunks = stream_chunks(response)
    assert streamed_text(chunks) == DRAFT
    ext = chunks[-1]["adapter_critic"]
    assert ext["degraded"] is True and "critic_error" in ext["intermediate"]
    assert len(upstream.calls) == 4


async def test_streaming_second_pass_failing_before_any_answer_streams_the_draft(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), Reply("critique"), HTTP_503, HTTP_503, HTTP_503)
    async with running(config(), upstream.app) as (client, _):
        response = await post(client, chat("m-critic", stream=True))

    chunks = stream_chunks(response)
    assert streamed_text(chunks) == DRAFT
    ext = chunks[-1]["adapter_critic"]
    assert ext["degraded"] is True and "api_final_error" in ext["intermediate"]
    assert ext["targets"] == {"api_draft": label("api-model"), "critic": label("critic-model")}


async def test_streaming_request_deadline_streams_the_draft(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT), Reply("critique"), Reply("late", first_chunk_delay=10))
    async with running(config(request_timeout_seconds=0.3), upstream.app) as (client, _):
        response = await post(client, chat("m-critic", stream=True))

    chunks = stream_chunks(response)
    assert streamed_text(chunks) == DRAFT
    ext = chunks[-1]["adapter_critic"]
    assert ext["degraded"] is True and "request_timeout_seconds" in ext["intermediate"]["api_final_error"]


# -- deep health -------------------------------------------------------------------------------------------------------


def health_config(**top: Any) -> Config:
    models = {
        "m-direct": {"mode": "direct", "api": target("api-model", api_key_env="PRIMARY_KEY")},
        "m-critic": {
            "mode": "critic",
            "api": target("api-model", fallbacks=[target("fallback-model", THIRD_URL)]),
            "critic": target("critic-model", OTHER_URL, api_key_env="OTHER_KEY"),
        },
    }
    return config(models, **top)


def health_upstream(calls: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if request.url.host == "third.test":
            raise httpx.ConnectError("[Errno 111] Connection refused")
        if request.url.host == "upstream.test":  # a shared URL that only accepts one of the keys sent to it
            accepted = request.headers.get("authorization") == "Bearer sk-primary"
            return httpx.Response(200 if accepted else 401, json={"data": []})
        return httpx.Response(503, json={"data": []})

    return httpx.MockTransport(answer)


async def test_deep_health_checks_each_distinct_url_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PRIMARY_KEY", "sk-primary")
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    calls: list[httpx.Request] = []
    async with running(health_config(), health_upstream(calls)) as (client, _):
        plain = await client.get("/health")
        assert calls == []  # plain /health stays cheap
        deep = await client.get("/health", params={"deep": "1"})

    assert plain.json() == {"status": "ok"}
    assert deep.status_code == 200
    report = deep.json()
    sent = sorted((c.url.host, c.headers.get("authorization", "")) for c in calls)
    # Each (URL, credentials) pair once: upstream.test twice, with m-direct's own key and with m-critic's (the
    # default key variable, unset here: no header at all).
    assert sent == [
        ("other.test", "Bearer sk-other"),
        ("third.test", ""),
        ("upstream.test", ""),
        ("upstream.test", "Bearer sk-primary"),
    ]
    assert all(c.method == "GET" and c.url.path == "/v1/models" for c in calls)
    assert report["status"] == "degraded" and report["upstreams_checked"] == 4
    targets = report["targets"]
    assert set(targets) == {"m-direct.api", "m-critic.api", "m-critic.api.fallbacks[0]", "m-critic.critic"}
    assert targets["m-direct.api"]["status"] == "ok" and targets["m-direct.api"]["http_status"] == 200
    # Its upstream lists no api-model: said, but the server's check stays a probe (no call to the model).
    assert targets["m-direct.api"]["listed"] is False
    # The same URL with the wrong (here: no) key reports its own failure.
    assert targets["m-critic.api"] == {**targets["m-critic.api"], "status": "error", "http_status": 401}
    assert targets["m-critic.critic"] == {**targets["m-critic.critic"], "status": "error", "http_status": 503}
    assert "could not connect to third.test:80" in targets["m-critic.api.fallbacks[0]"]["error"]
    assert all(t["latency_ms"] >= 0 for t in targets.values())
    assert targets["m-critic.critic"]["model"] == "critic-model" and targets["m-critic.critic"]["base_url"] == OTHER_URL


async def test_deep_health_needs_the_key_when_inbound_auth_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INBOUND_KEYS", "inbound-key")
    calls: list[httpx.Request] = []
    async with running(health_config(auth_api_keys_env="INBOUND_KEYS"), health_upstream(calls)) as (client, _):
        assert (await client.get("/health")).status_code == 200
        refused = await client.get("/health", params={"deep": "1"})
        allowed = await client.get("/health", params={"deep": "1"}, headers={"authorization": "Bearer inbound-key"})

    assert envelope(refused, 401)["type"] == "authentication_error"
    assert allowed.status_code == 200 and len(calls) == 4


async def test_deep_health_of_the_demo_checks_its_in_process_model() -> None:
    app = build_app(compose(demo_config(), in_process_app=demo_model_app()), prefix="/v1")
    async with asgi_client(app) as client:
        report = (await client.get("/v1/health", params={"deep": "1"})).json()

    assert report["status"] == "ok" and report["upstreams_checked"] == 1
    assert {t["http_status"] for t in report["targets"].values()} == {200}
    assert all(t["listed"] is True for t in report["targets"].values())  # the demo model lists its model


# -- a failed attempt counts what its upstream reported (SPEC §5/§6) -------------------------------------------------

SPENT = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
ANSWERED = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}  # the scripted upstream's default usage
FAILED_WITH_USAGE = Reply(status=500, body=json.dumps({"error": {"message": "boom"}, "usage": SPENT}))


def summed(*usages: dict[str, int]) -> dict[str, int]:
    return {key: sum(u[key] for u in usages) for key in ANSWERED}


async def test_retried_attempts_that_reported_usage_are_counted_in_their_stage(upstream: ScriptedUpstream) -> None:
    upstream.script(FAILED_WITH_USAGE, FAILED_WITH_USAGE)
    async with running(config(), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-direct")))

    assert len(upstream.calls) == 3
    assert data["adapter_critic"]["tokens"]["stages"]["api"] == summed(SPENT, SPENT, ANSWERED)
    assert data["usage"] == data["adapter_critic"]["tokens"]["total"]


async def test_a_degraded_reviewer_counts_the_usage_its_failure_reported(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(DRAFT, model="api-model"), FAILED_WITH_USAGE)
    async with running(config(retries=0), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-critic")))

    ext = data["adapter_critic"]
    assert ext["degraded"] is True
    assert ext["tokens"]["stages"] == {"api_draft": ANSWERED, "critic": SPENT}
    assert data["usage"] == summed(ANSWERED, SPENT)


async def test_every_retried_unusable_answer_counts_what_it_reported(upstream: ScriptedUpstream) -> None:
    # 200s that are no usable completion (no choices) but report usage: retried, each attempt counted, then degraded.
    no_choices = {"object": "chat.completion", "choices": [], "usage": SPENT}
    unusable = Reply(body=json.dumps(no_choices), model="critic-model")
    upstream.script(Reply(DRAFT, model="api-model"), unusable, unusable)
    async with running(config(retries=1), upstream.app) as (client, _):
        data = ok(await post(client, chat("m-critic")))

    ext = data["adapter_critic"]
    assert ext["degraded"] is True and len(upstream.calls) == 3
    assert ext["tokens"]["stages"] == {"api_draft": ANSWERED, "critic": summed(SPENT, SPENT)}
    assert data["usage"] == summed(ANSWERED, SPENT, SPENT)


async def test_a_broken_stream_that_reported_usage_is_counted_when_retried(upstream: ScriptedUpstream) -> None:
    # The second pass breaks off (no `[DONE]`) after its usage chunk but before any answer text went out: it is
    # retried, and the stage counts both attempts.
    broken = Reply(content="", model="api-model", stream_no_done=True)
    upstream.script(Reply(DRAFT, model="api-model"), Reply("critique", model="critic-model"), broken)
    body = chat("m-critic", stream=True, stream_options={"include_usage": True})
    async with running(config(retries=1), upstream.app) as (client, _):
        response = await post(client, body)
    chunks = stream_chunks(response)

    assert len(upstream.calls) == 4
    usage = chunks[-1]["usage"]
    assert chunks[-1]["adapter_critic"]["tokens"]["stages"]["api_final"] == summed(ANSWERED, ANSWERED)
    assert usage == summed(ANSWERED, ANSWERED, ANSWERED, ANSWERED)
