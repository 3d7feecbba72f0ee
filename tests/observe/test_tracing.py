"""OpenTelemetry spans (`[telemetry] tracing = true`), read with the SDK's in-memory exporter: one
`invoke_workflow {served model}` span per run with a `chat {model}` child per stage call, GenAI attributes, the
caller's `traceparent` continued and each upstream call carrying its stage span's; never message text or keys."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ..conftest import UPSTREAM_URL, AppFactory, chat, make_config
from ..scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SECRET = "sk-tracing-secret-key-1234567890"
TEXT = "What is the capital of Burkina Faso?"
ANSWERS = ("Ouagadougou, first try", "Say more about it", "Ouagadougou, the capital")

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    """The global tracer provider can be set once per process: this module's, exporting to memory."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def traced(**overrides: Any) -> Any:
    return make_config(telemetry={"tracing": True}, default_api_key_env="TRACING_UP_KEY", **overrides)


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


async def test_a_run_and_its_stages_continue_the_callers_trace(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACING_UP_KEY", SECRET)
    upstream.script(Reply(ANSWERS[0]), Reply(ANSWERS[1]), Reply(ANSWERS[2], finish_reason="length"))
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    async with serve(traced()) as client:
        response = await client.post(
            "/chat/completions", json=chat("m-critic", TEXT), headers={"traceparent": traceparent}
        )
    assert response.status_code == 200
    named = by_name(spans)
    [run] = named["invoke_workflow m-critic"]
    stages = named["chat api-model"] + named["chat critic-model"]
    assert len(stages) == 3
    assert run.context is not None and run.parent is not None
    assert format(run.context.trace_id, "032x") == TRACE_ID
    assert format(run.parent.span_id, "016x") == PARENT_ID  # the caller's span
    assert run.kind == SpanKind.INTERNAL
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run.attributes["gen_ai.workflow.name"] == "m-critic"
    assert run.attributes["adapter_critic.mode"] == "critic"
    assert run.attributes["adapter_critic.request_id"] == response.json()["id"]
    assert run.attributes["adapter_critic.status"] == "ok"
    assert (run.attributes["gen_ai.usage.input_tokens"], run.attributes["gen_ai.usage.output_tokens"]) == (3, 6)
    assert run.attributes["gen_ai.response.finish_reasons"] == ("length",)

    ordered = sorted(stages, key=lambda span: span.start_time or 0)
    assert [s.attributes["adapter_critic.stage"] for s in ordered if s.attributes] == [
        "api_draft",
        "critic",
        "api_final",
    ]
    for stage, call in zip(ordered, upstream.calls, strict=True):
        assert stage.kind == SpanKind.CLIENT
        assert stage.parent is not None and stage.context is not None
        assert stage.parent.span_id == run.context.span_id
        assert stage.attributes is not None
        assert stage.attributes["gen_ai.operation.name"] == "chat"
        assert stage.attributes["gen_ai.provider.name"] == "openai"
        assert stage.attributes["gen_ai.request.model"] == call.model
        assert stage.attributes["server.address"] == "upstream.test"
        assert stage.attributes["server.port"] == 80
        assert (stage.attributes["gen_ai.usage.input_tokens"], stage.attributes["gen_ai.usage.output_tokens"]) == (1, 2)
        # The upstream call carried its own stage span as the parent.
        assert call.headers["traceparent"] == f"00-{TRACE_ID}-{stage.context.span_id:016x}-01"
    assert ordered[-1].attributes is not None and ordered[-1].attributes["gen_ai.response.finish_reasons"] == (
        "length",
    )
    assert_nothing_private(spans)


async def test_without_a_traceparent_the_run_span_is_a_root(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter
) -> None:
    async with serve(traced()) as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 200
    [run] = by_name(spans)["invoke_workflow m-direct"]
    [stage] = by_name(spans)["chat api-model"]
    assert run.parent is None
    assert stage.parent is not None and run.context is not None and stage.parent.span_id == run.context.span_id
    assert upstream.calls[0].headers["traceparent"].split("-")[1] == format(run.context.trace_id, "032x")


async def test_failed_attempts_and_a_degraded_run(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACING_UP_KEY", SECRET)
    upstream.script(
        Reply(ANSWERS[0]),
        Reply(status=503, body=f'{{"error": {{"message": "overloaded, key {SECRET}"}}}}'),
        Reply(status=500, body="{}"),
    )
    async with serve(traced(retries=1, retry_backoff_seconds=0)) as client:
        response = await client.post("/chat/completions", json=chat("m-critic", TEXT))
    assert response.json()["adapter_critic"]["degraded"] is True
    named = by_name(spans)
    [critic] = named["chat critic-model"]
    assert critic.status.status_code == StatusCode.ERROR
    assert critic.attributes is not None
    assert critic.attributes["error.type"] == "500"
    assert critic.attributes["adapter_critic.attempts"] == 2
    assert [(e.name, dict(e.attributes or {})["error.type"]) for e in critic.events] == [
        ("adapter_critic.attempt_failed", "503"),
        ("adapter_critic.attempt_failed", "500"),
    ]
    [run] = named["invoke_workflow m-critic"]
    assert run.attributes is not None
    assert run.attributes["adapter_critic.status"] == "degraded" and run.attributes["adapter_critic.degraded"] is True
    assert run.status.status_code == StatusCode.UNSET  # the client got an answer
    assert_nothing_private(spans)


async def test_a_failed_run_is_an_error_span(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter
) -> None:
    upstream.script(Reply(status=502, body="{}"))
    async with serve(traced()) as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 502
    [run] = by_name(spans)["invoke_workflow m-direct"]
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["adapter_critic.status"] == "error" and run.attributes["error.type"] == "502"


async def test_a_streamed_run_is_traced_like_a_plain_one(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter
) -> None:
    async with serve(traced()) as client:
        response = await client.post("/chat/completions", json=chat("m-direct", TEXT, stream=True))
        assert response.text.rstrip().endswith("data: [DONE]")
    [run] = by_name(spans)["invoke_workflow m-direct"]
    [stage] = by_name(spans)["chat api-model"]
    assert run.attributes is not None and run.attributes["adapter_critic.stream"] is True
    assert stage.attributes is not None and stage.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert stage.parent is not None and run.context is not None and stage.parent.span_id == run.context.span_id
    assert "traceparent" in upstream.calls[0].headers


async def test_stage_and_run_spans_say_what_they_cost(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter
) -> None:
    prices = {"pricing": {"currency": "EUR"}, "prices": {"api-*": {"input": 2, "output": 8}}}  # critic-model: none
    upstream.script(Reply(ANSWERS[0]), Reply(ANSWERS[1]), Reply(ANSWERS[2]))
    async with serve(traced(**prices)) as client:
        assert (await client.post("/chat/completions", json=chat("m-critic", TEXT))).status_code == 200
        upstream.script(Reply(ANSWERS[0]))
        assert (await client.post("/chat/completions", json=chat("m-direct", TEXT))).status_code == 200
    named = by_name(spans)
    api_stages = sorted(named["chat api-model"], key=lambda span: span.start_time or 0)
    [critic] = named["chat critic-model"]
    for stage in api_stages:  # 1 input and 2 output tokens each
        assert stage.attributes is not None
        assert stage.attributes["adapter_critic.cost.amount"] == pytest.approx(18e-6)
        assert stage.attributes["adapter_critic.cost.currency"] == "EUR"
        assert "adapter_critic.cost.unknown" not in stage.attributes
    assert critic.attributes is not None
    assert critic.attributes["adapter_critic.cost.unknown"] is True
    assert "adapter_critic.cost.amount" not in critic.attributes
    [critic_run] = named["invoke_workflow m-critic"]
    assert critic_run.attributes is not None
    assert "adapter_critic.cost.total" not in critic_run.attributes  # unknown: a stage has no price
    assert critic_run.attributes["adapter_critic.cost.total_known"] == pytest.approx(36e-6)
    assert critic_run.attributes["adapter_critic.cost.unknown_stages"] == ("critic",)
    assert critic_run.attributes["adapter_critic.cost.currency"] == "EUR"
    [direct_run] = named["invoke_workflow m-direct"]
    assert direct_run.attributes is not None
    assert direct_run.attributes["adapter_critic.cost.total"] == pytest.approx(18e-6)
    assert "adapter_critic.cost.unknown_stages" not in direct_run.attributes


async def test_tracing_is_off_by_default(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter
) -> None:
    async with serve() as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 200
    assert spans.get_finished_spans() == ()
    assert "traceparent" not in upstream.calls[0].headers


async def test_without_prices_spans_carry_no_cost(serve: AppFactory, spans: InMemorySpanExporter) -> None:
    async with serve(traced()) as client:
        assert (await client.post("/chat/completions", json=chat("m-direct"))).status_code == 200
    for span in spans.get_finished_spans():
        assert span.attributes is not None and not [k for k in span.attributes if k.startswith("adapter_critic.cost")]


def assert_nothing_private(exporter: InMemorySpanExporter) -> None:
    """No span, attribute or event holds the message text, an answer or the upstream key."""
    for span in exporter.get_finished_spans():
        texts = [span.name, repr(dict(span.attributes or {})), span.status.description or ""]
        texts += [repr(dict(event.attributes or {})) for event in span.events]
        for text in texts:
            assert SECRET not in text and TEXT not in text
            assert not any(answer in text for answer in ANSWERS)


async def test_concurrent_stage_calls_each_have_their_span(
    serve: AppFactory, upstream: ScriptedUpstream, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """A panel's lenses call at once, each in a task of its own: each call carries its own stage span."""
    caplog.set_level(logging.ERROR)
    api = {"model": "api-model", "base_url": UPSTREAM_URL}
    critic = {"model": "critic-model", "base_url": UPSTREAM_URL}
    served = {"m-panel": {"mode": "panel", "api": api, "critic": critic}}
    async with serve(traced(served_models=served)) as client:
        assert (await client.post("/chat/completions", json=chat("m-panel", TEXT))).status_code == 200
    [run] = by_name(spans)["invoke_workflow m-panel"]
    stages = [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]
    assert len(stages) == len(upstream.calls) > 4  # the draft, the lenses, the coordinator, the second pass
    assert run.context is not None
    assert all(stage.parent is not None and stage.parent.span_id == run.context.span_id for stage in stages)
    sent = {call.headers["traceparent"].split("-")[2] for call in upstream.calls}
    assert sent == {format(stage.context.span_id, "016x") for stage in stages if stage.context is not None}
    assert not [record for record in caplog.records if record.name.startswith("opentelemetry")]
