"""Prometheus metrics: `GET /metrics` of the standalone server through real uvicorn counts runs in every mode,
errors, retries, degraded answers, tokens and streams; `--workers 2` answers the sum over both workers; mounted
and middleware apps serve it only when configured; a run store's queue depth and drops are exported."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from adapter_critic import AdapterCriticMiddleware, create_app
from adapter_critic.core import Usage
from adapter_critic.events import StageFinished
from adapter_critic.observe.metrics import MAX_TARGET_MODELS, Metrics
from adapter_critic.observe.targets import TargetName, target_name
from adapter_critic.store import open_store

from ..conftest import UVICORN, AppFactory, RemoteUpstream, asgi_client, chat, make_config, run_server, sdk
from ..helpers import served_toml, target
from ..scripted_upstream import ScriptedUpstream

MESSAGES: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def scrape(url: str) -> Samples:
    response = httpx.get(f"{url}/metrics", timeout=60)  # the first request waits for the server to start
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def config_toml(upstream_url: str, extra: str = "") -> str:
    up = f"{upstream_url}/v1"
    return f"""
retries = 1
retry_backoff_seconds = 0
{extra}
{served_toml(up, "m")}"""


@pytest.fixture(scope="module")
def remote_upstream(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url)


def start(upstream: RemoteUpstream, directory: Path, *args: str, extra: str = "") -> Any:
    config = directory / "config.toml"
    config.write_text(config_toml(upstream.url, extra))
    env = {"ADAPTER_CRITIC_CONFIG": str(config), "OPENAI_API_KEY": "", "TMPDIR": str(directory)}
    return run_server([*UVICORN, *args], env=env)


def fail(model: str, status: int = 500) -> dict[str, Any]:
    return {"model": model, "status": status, "body": '{"error": {"message": "scripted failure"}}'}


def test_metrics_count_every_kind_of_run_through_uvicorn(remote_upstream: RemoteUpstream, tmp_path: Path) -> None:
    upstream = remote_upstream.reset()
    with start(upstream, tmp_path) as (url, _):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        before = scrape(url)
        assert value(before, "adapter_critic_requests_total", served_model="m-direct", mode="direct", status="ok") == 0
        assert value(before, "adapter_critic_requests_in_flight") == 0

        client.chat.completions.create(model="m-direct", messages=MESSAGES)
        upstream.script(fail("api-model"))  # retried once, then answered
        client.chat.completions.create(model="m-direct", messages=MESSAGES)
        upstream.script(fail("api-model", 502), fail("api-model", 503))  # both attempts fail: the request fails
        with pytest.raises(Exception, match="502"):
            client.chat.completions.create(model="m-direct", messages=MESSAGES)
        upstream.script({"model": "adapter-model", "content": "lgtm"})
        client.chat.completions.create(model="m-adapter", messages=MESSAGES)
        client.chat.completions.create(model="m-critic", messages=MESSAGES)
        upstream.script(fail("critic-model"), fail("critic-model"))  # the critic fails: the draft stands
        degraded = client.chat.completions.create(model="m-critic", messages=MESSAGES)
        assert (degraded.model_extra or {})["adapter_critic"]["degraded"] is True
        text = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(model="m-direct", messages=MESSAGES, stream=True)
            if chunk.choices
        )
        assert text.startswith("echo api-model")
        upstream.script({"model": "adapter-model", "content": "lgtm"})
        list(client.chat.completions.create(model="m-adapter", messages=MESSAGES, stream=True))

        got = scrape(url)

    def requests(model: str, mode: str, status: str) -> float:
        return value(got, "adapter_critic_requests_total", served_model=model, mode=mode, status=status)

    assert requests("m-direct", "direct", "ok") == 3
    assert requests("m-direct", "direct", "error") == 1
    assert requests("m-adapter", "adapter", "ok") == 2
    assert requests("m-critic", "critic", "ok") == 1
    assert requests("m-critic", "critic", "degraded") == 1
    assert value(got, "adapter_critic_degraded_total", served_model="m-critic", mode="critic") == 1
    assert value(got, "adapter_critic_request_duration_seconds_count", served_model="m-direct", mode="direct") == 4
    assert value(got, "adapter_critic_request_duration_seconds_count", served_model="m-critic", mode="critic") == 2
    # Time to first token: streamed runs only (one relayed live, one whose answer was known whole).
    assert value(got, "adapter_critic_time_to_first_token_seconds_count", served_model="m-direct", mode="direct") == 1
    assert value(got, "adapter_critic_time_to_first_token_seconds_count", served_model="m-adapter", mode="adapter") == 1
    assert value(got, "adapter_critic_time_to_first_token_seconds_count", served_model="m-critic", mode="critic") == 0
    # Upstream errors per failed attempt; retries per attempt after a stage call's first.
    assert value(got, "adapter_critic_upstream_errors_total", stage="api", kind="status") == 3
    assert value(got, "adapter_critic_upstream_errors_total", stage="critic", kind="status") == 2
    assert value(got, "adapter_critic_retries_total", stage="api") == 2
    assert value(got, "adapter_critic_retries_total", stage="critic") == 1
    # Stage calls: direct 4 (3 plain, 1 streamed) + adapter 2 on `api`; critic 2 x api_draft, critic; 1 x api_final.
    assert value(got, "adapter_critic_stage_duration_seconds_count", stage="api", target_model="api-model") == 6
    assert value(got, "adapter_critic_stage_duration_seconds_count", stage="adapter", target_model="adapter-model") == 2
    assert value(got, "adapter_critic_stage_duration_seconds_count", stage="critic", target_model="critic-model") == 2
    assert value(got, "adapter_critic_stage_duration_seconds_count", stage="api_final", target_model="api-model") == 1
    # The scripted upstream reports 1 input and 2 output tokens per answered call; failures report none.
    assert value(got, "adapter_critic_tokens_total", stage="api", direction="input") == 5
    assert value(got, "adapter_critic_tokens_total", stage="api", direction="output") == 10
    assert value(got, "adapter_critic_tokens_total", stage="critic", direction="output") == 2
    assert value(got, "adapter_critic_requests_in_flight") == 0
    # The standalone server records its runs (the default store): its queue is exported, nothing was dropped.
    assert ("adapter_critic_store_queue_depth", frozenset()) in got
    assert value(got, "adapter_critic_store_dropped_records_total") == 0
    assert not [name for name, _ in got if name.startswith("adapter_critic_cost")]  # no prices: no cost series


PRICES = """
[pricing]
currency = "EUR"
[prices."api-model"]
input = 2.0
output = 8.0
[prices."critic-*"]
input = 1.0
output = 4.0
"""


def test_cost_is_counted_by_served_model_stage_target_model_and_currency(
    remote_upstream: RemoteUpstream, tmp_path: Path
) -> None:
    upstream = remote_upstream.reset()
    with start(upstream, tmp_path, extra=PRICES) as (url, _):
        client = sdk(OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
        upstream.script({"model": "adapter-model", "content": "lgtm"})
        for model in ("m-direct", "m-direct", "m-critic", "m-adapter"):
            client.chat.completions.create(model=model, messages=MESSAGES)
        got = scrape(url)

    def cost(served_model: str, stage: str, target_model: str) -> float:
        labels = {"served_model": served_model, "stage": stage, "target_model": target_model, "currency": "EUR"}
        return value(got, "adapter_critic_cost_total", **labels)

    # Every answered call reports 1 input and 2 output tokens: 18 millionths at api-model's prices, 9 at critic-*'s.
    assert cost("m-direct", "api", "api-model") == pytest.approx(2 * 18e-6)
    assert cost("m-critic", "api_draft", "api-model") == pytest.approx(18e-6)
    assert cost("m-critic", "critic", "critic-model") == pytest.approx(9e-6)
    assert cost("m-critic", "api_final", "api-model") == pytest.approx(18e-6)
    assert cost("m-adapter", "api", "api-model") == pytest.approx(18e-6)
    # adapter-model has no price: its cost is unknown, and an unknown cost is never counted (not even as 0).
    costed = {dict(labels)["stage"] for name, labels in got if name == "adapter_critic_cost_total"}
    assert costed == {"api", "api_draft", "critic", "api_final"}


def test_in_flight_counts_a_request_being_answered(remote_upstream: RemoteUpstream, tmp_path: Path) -> None:
    upstream = remote_upstream.reset()
    upstream.script({"model": "api-model", "content": "one two three four", "chunk_delay": 30})
    with start(upstream, tmp_path) as (url, _), httpx.Client(base_url=url, timeout=30) as http:
        body = {"model": "m-direct", "messages": MESSAGES, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()  # kept: dropping it would close the connection
            assert next(lines).startswith("data: ")  # the upstream holds its next chunk: the request is in flight
            assert value(scrape(url), "adapter_critic_requests_in_flight") == 1
        assert upstream.aborted(wait=10)  # the client left: the run was cancelled
        assert value(scrape(url), "adapter_critic_requests_in_flight") == 0


def test_workers_answer_the_sum_over_workers(remote_upstream: RemoteUpstream, tmp_path: Path) -> None:
    upstream = remote_upstream.reset()
    store_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"  # one SQLite file, both workers writing to it
    with start(upstream, tmp_path, "--workers", "2", extra=f'[store]\nurl = "{store_url}"\n') as (url, _):
        assert httpx.get(f"{url}/v1/health", timeout=60).status_code == 200  # a worker is up
        sent = 0
        statuses: list[int] = []
        # Connections are spread over the workers by the kernel: send until both have counted some.
        for _ in range(20):
            threads = [threading.Thread(target=_one_request, args=(url, statuses)) for _ in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            sent += len(threads)
            if len(_worker_files(tmp_path)) >= 2:
                break
        assert statuses == [200] * sent
        assert len(_worker_files(tmp_path)) == 2, "both workers served requests"
        for _ in range(4):  # whichever worker answers the scrape, it answers the sum
            got = scrape(url)
            assert (
                value(got, "adapter_critic_requests_total", served_model="m-direct", mode="direct", status="ok") == sent
            )
            assert value(got, "adapter_critic_tokens_total", stage="api", direction="output") == 2 * sent
            assert value(got, "adapter_critic_requests_in_flight") == 0
            assert value(got, "adapter_critic_store_dropped_records_total") == 0
        # Each worker counts its own requests in flight as they come and go; a scrape answers the sum.
        upstream.script({"model": "api-model", "content": "one two three four", "chunk_delay": 30})
        with httpx.Client(base_url=url, timeout=30) as http:
            body = {"model": "m-direct", "messages": MESSAGES, "stream": True}
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                lines = response.iter_lines()
                assert next(lines).startswith("data: ")  # the upstream holds its next chunk: in flight
                for _ in range(4):
                    assert value(scrape(url), "adapter_critic_requests_in_flight") == 1
    # Both workers wrote their runs into the one SQLite file, none lost: every request sent, and the held stream.
    stored = asyncio.run(_stored(store_url))
    assert len(stored) == sent + 1 and stored.count("ok") >= sent


async def _stored(url: str) -> list[str]:
    """The status of every run in the store at `url`."""
    async with await open_store(url) as store:
        return [run.status for run in (await store.list_runs(limit=1000)).data]


def _one_request(url: str, statuses: list[int]) -> None:
    with httpx.Client(timeout=60) as http:  # a connection of its own
        response = http.post(f"{url}/v1/chat/completions", json={"model": "m-direct", "messages": MESSAGES})
        statuses.append(response.status_code)


def _worker_files(directory: Path) -> list[Path]:
    return list(directory.glob("adapter_critic-metrics-*/counter_*.db"))


def test_metrics_can_be_turned_off_standalone(remote_upstream: RemoteUpstream, tmp_path: Path) -> None:
    with start(remote_upstream, tmp_path, extra="[telemetry]\nmetrics = false\n") as (url, _):
        assert httpx.get(f"{url}/metrics", timeout=60).status_code == 404


@pytest.mark.anyio
async def test_a_mounted_app_serves_metrics_only_when_configured(serve: AppFactory) -> None:
    async with serve() as client:
        assert (await client.get("/metrics")).status_code == 404
    async with serve(make_config(telemetry={"metrics": True, "metrics_path": "/stats"})) as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 200
        got = parse((await client.get("/stats")).text)
    assert value(got, "adapter_critic_requests_total", served_model="m-direct", mode="direct", status="ok") == 1


@pytest.mark.anyio
async def test_a_stage_run_by_another_served_model_is_counted_once(serve: AppFactory) -> None:
    """A child run's upstream calls count; the parent's stage that ran it (the same tokens again) and the child run
    (part of the client's one request) do not."""
    inner = {"mode": "critic", "api": target("inner-api")}
    outer = {"mode": "critic", "api": target("outer-api"), "critic": {"served": "inner"}}
    config = make_config(telemetry={"metrics": True}, served_models={"inner": inner, "outer": outer})
    async with serve(config) as client:
        assert (await client.post("/chat/completions", json=chat("outer"))).status_code == 200
        got = parse((await client.get("/metrics")).text)
    assert value(got, "adapter_critic_requests_total", served_model="outer", mode="critic", status="ok") == 1
    assert value(got, "adapter_critic_requests_total", served_model="inner", mode="critic", status="ok") == 0
    # Every call reports 1 prompt token: the outer draft and the inner one; the inner critic alone.
    assert value(got, "adapter_critic_tokens_total", stage="api_draft", direction="input") == 2
    assert value(got, "adapter_critic_tokens_total", stage="critic", direction="input") == 1
    assert value(got, "adapter_critic_tokens_total", stage="api_final", direction="input") == 2


@pytest.mark.anyio
async def test_the_middleware_answers_metrics_behind_its_auth(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("the wrapped app")

    monkeypatch.setenv("METRICS_INBOUND_KEYS", "k1")
    config = make_config(telemetry={"metrics": True}, auth_api_keys_env="METRICS_INBOUND_KEYS")
    inner = Starlette(routes=[Route("/", home), Route("/v1/chat/completions", upstream.app, methods=["POST"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = AdapterCriticMiddleware(inner, config=config, http_client=upstream_client)
        async with asgi_client(app) as client:
            assert (await client.get("/metrics")).status_code == 401
            headers = {"authorization": "Bearer k1"}
            assert (
                await client.post("/v1/chat/completions", json=chat("m-direct"), headers=headers)
            ).status_code == 200
            response = await client.get("/metrics", headers=headers)
            assert (await client.get("/")).text == "the wrapped app"
    got = parse(response.text)
    assert value(got, "adapter_critic_requests_total", served_model="m-direct", mode="direct", status="ok") == 1


class FakeStore:
    """What the metrics read of a run store."""

    def __init__(self) -> None:
        self.queue_depth = 0
        self.dropped = 0


def test_a_watched_store_exports_its_queue_depth_and_drops() -> None:
    metrics = Metrics()
    stores: list[FakeStore] = []
    metrics.watch_store(lambda: stores[-1] if stores else None)  # no store yet: nothing to read
    assert value(parse(metrics.render()[0].decode()), "adapter_critic_store_queue_depth") == 0
    store = FakeStore()
    stores.append(store)
    store.queue_depth, store.dropped = 7, 3
    got = parse(metrics.render()[0].decode())
    assert value(got, "adapter_critic_store_queue_depth") == 7
    assert value(got, "adapter_critic_store_dropped_records_total") == 3
    store.queue_depth, store.dropped = 0, 5
    got = parse(metrics.render()[0].decode())
    assert value(got, "adapter_critic_store_queue_depth") == 0
    assert value(got, "adapter_critic_store_dropped_records_total") == 5
    stores.append(FakeStore())  # a new store (a restarted lifespan) counts from zero
    stores[-1].dropped = 2
    assert value(parse(metrics.render()[0].decode()), "adapter_critic_store_dropped_records_total") == 7


@pytest.mark.parametrize(
    ("label", "model", "host", "port"),
    [
        ("gpt-4.1@https://api.openai.com/v1", "gpt-4.1", "api.openai.com", 443),
        ("claude-3-5-sonnet@20240620@http://127.0.0.1:8000/v1", "claude-3-5-sonnet@20240620", "127.0.0.1", 8000),
        ("local@/v1", "local", None, None),
        ("m@http://***@gateway.test/v1", "m", "gateway.test", 80),
    ],
)
def test_a_target_label_names_its_model_and_host(label: str, model: str, host: str | None, port: int | None) -> None:
    assert target_name(label) == TargetName(model, host, port)


def test_target_models_past_the_limit_are_counted_as_other() -> None:
    metrics = Metrics()
    for number in range(MAX_TARGET_MODELS + 5):
        metrics.on_event(StageFinished("api", f"model-{number}@http://up.test/v1", (), Usage(), 1.0))
    got = parse(metrics.render()[0].decode())
    models = {
        dict(labels)["target_model"] for name, labels in got if name == "adapter_critic_stage_duration_seconds_count"
    }
    assert len(models) == MAX_TARGET_MODELS + 1
    assert value(got, "adapter_critic_stage_duration_seconds_count", stage="api", target_model="other") == 5


@pytest.mark.anyio
async def test_the_run_stores_queue_and_drops_are_read_from_the_store(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    store = {"url": f"sqlite:///{tmp_path / 'runs.sqlite3'}", "queue_size": 1}
    config = make_config(telemetry={"metrics": True}, store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as upstream_client:
        app = create_app(config, http_client=upstream_client)
        async with asgi_client(app) as client:
            # Many runs start at once: their records overflow a queue of one and are dropped (never the requests).
            answers = await asyncio.gather(
                *(client.post("/chat/completions", json=chat("m-direct")) for _ in range(20))
            )
            assert {answer.status_code for answer in answers} == {200}
            got = parse((await client.get("/metrics")).text)
            recording = app.state.adapter_critic.store
            assert recording.dropped > 0
            assert value(got, "adapter_critic_store_dropped_records_total") == recording.dropped
            assert value(got, "adapter_critic_store_queue_depth") == recording.queue_depth
