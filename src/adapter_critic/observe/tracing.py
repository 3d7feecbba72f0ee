"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

OpenTelemetry tracing: a span per run and per stage call, following the GenAI semantic conventions, with the
caller's trace continued (inbound `traceparent`) and carried on to the upstreams (outbound `traceparent`).

- `invoke_workflow {served model}` (INTERNAL) for each run: `gen_ai.operation.name = invoke_workflow`,
  `gen_ai.workflow.name`, the mode, the request id, the run's status and total usage, the answer's finish reason.
- `chat {model}` (CLIENT) for each stage call, a child of its run's span: `gen_ai.operation.name = chat`,
  `gen_ai.provider.name = openai` (the protocol every upstream speaks), `gen_ai.request.model`, `server.address`,
  `server.port`, `gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.response.finish_reasons`, the stage and its
  attempts; each failed attempt is a span event, a failed stage an error status with `error.type`.
- When prices are configured (docs/guides/cost.md), what it cost: a stage span's `adapter_critic.cost.amount`
  (left out when unknown, and `adapter_critic.cost.unknown = true` said instead), a run span's
  `adapter_critic.cost.total` (left out when unknown), `adapter_critic.cost.total_known` and
  `adapter_critic.cost.unknown_stages`; both with `adapter_critic.cost.currency`.

Spans never carry message text, answers, error bodies or keys. Spans go to the global tracer provider: the
host's (or `opentelemetry-instrument`'s) SDK set-up decides where they are exported; without one they cost
next to nothing. `opentelemetry-api` (the `[otel]` extra) is imported only when tracing is on.

The subscriber keeps a run's and a stage's span in context variables: a stage call publishes `StageStarted`
and `StageFinished` on the task that makes it, so concurrent stages (in tasks of their own) each see theirs,
and the outbound call made in between carries the stage span's `traceparent`.
"""

from __future__ import annotations

import contextvars
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import Scope

from ..errors import UpstreamError
from ..events import Event, RunFinished, RunStarted, StageFinished, StageStarted
from ..version import __version__
from .targets import target_name

_PROPAGATED = (b"traceparent", b"tracestate", b"baggage")


class _Open:
    """A span this subscriber started and made current, with the tokens that undo it."""

    __slots__ = ("context_token", "span", "var_token")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.context_token = context.attach(trace.set_span_in_context(span))
        self.var_token: contextvars.Token[_Open | None] | None = None

    def close(self, var: contextvars.ContextVar[_Open | None]) -> None:
        self.span.end()
        context.detach(self.context_token)
        if self.var_token is not None:
            var.reset(self.var_token)


_run: contextvars.ContextVar[_Open | None] = contextvars.ContextVar("adapter_critic_run_span", default=None)
_stage: contextvars.ContextVar[_Open | None] = contextvars.ContextVar("adapter_critic_stage_span", default=None)


class Tracing:
    """Spans for the runs of one server: `on_event` is its run-event subscriber, `inbound` continues the caller's
    trace for one request, `inject` adds the current span's `traceparent` to an upstream call's headers."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("adapter_critic", __version__, tracer_provider=tracer_provider)

    def inbound(self, scope: Scope) -> _Inbound:
        return _Inbound(scope)

    def inject(self, headers: dict[str, str]) -> None:
        propagate.inject(headers)

    def on_event(self, event: Event) -> None:
        kind = type(event)
        if kind is StageStarted:
            assert isinstance(event, StageStarted)
            self._stage_started(event)
        elif kind is StageFinished:
            assert isinstance(event, StageFinished)
            self._stage_finished(event)
        elif kind is RunStarted:
            assert isinstance(event, RunStarted)
            span = self.tracer.start_span(
                f"invoke_workflow {event.served_model}",
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": event.served_model,
                    "adapter_critic.mode": event.mode,
                    "adapter_critic.request_id": event.run_id,
                    "adapter_critic.stream": event.stream,
                },
            )
            opened = _Open(span)
            opened.var_token = _run.set(opened)
        elif kind is RunFinished:
            assert isinstance(event, RunFinished)
            self._run_finished(event)

    def _stage_started(self, event: StageStarted) -> None:
        name = target_name(event.target)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": name.model,
            "adapter_critic.stage": event.stage,
        }
        if name.host is not None:
            attributes["server.address"] = name.host
            attributes["server.port"] = name.port
        span = self.tracer.start_span(f"chat {name.model}", kind=SpanKind.CLIENT, attributes=attributes)
        opened = _Open(span)
        opened.var_token = _stage.set(opened)

    def _stage_finished(self, event: StageFinished) -> None:
        opened = _stage.get()
        if opened is None:
            return
        span = opened.span
        if span.is_recording():
            attributes: dict[str, Any] = {"adapter_critic.attempts": len(event.attempts)}
            if event.reported:
                attributes["gen_ai.usage.input_tokens"] = event.usage.prompt_tokens
                attributes["gen_ai.usage.output_tokens"] = event.usage.completion_tokens
            if event.finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = [event.finish_reason]
            cost = event.cost
            if cost is not None:
                attributes["adapter_critic.cost.currency"] = cost.currency
                if cost.amount is None:
                    attributes["adapter_critic.cost.unknown"] = True
                else:
                    attributes["adapter_critic.cost.amount"] = cost.amount
            if event.attempts and event.target != event.attempts[0].target:
                attributes["adapter_critic.answered_by"] = target_name(event.target).model
            for attempt in event.attempts:
                if attempt.error is not None:
                    span.add_event(
                        "adapter_critic.attempt_failed",
                        {"gen_ai.request.model": target_name(attempt.target).model, "error.type": _kind(attempt.error)},
                    )
            if event.error is not None:
                attributes["error.type"] = _kind(event.error)
                span.set_status(Status(StatusCode.ERROR, f"{event.error.kind} ({event.stage})"))
            span.set_attributes(attributes)
        opened.close(_stage)

    def _run_finished(self, event: RunFinished) -> None:
        opened = _run.get()
        if opened is None:
            return
        span = opened.span
        if span.is_recording():
            record = event.record
            total = record.total_usage()
            attributes: dict[str, Any] = {
                "adapter_critic.status": event.status,
                "adapter_critic.degraded": record.degraded,
                "gen_ai.usage.input_tokens": total.prompt_tokens,
                "gen_ai.usage.output_tokens": total.completion_tokens,
            }
            if record.answer.finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = [record.answer.finish_reason]
            cost = record.cost()
            if cost is not None:
                attributes["adapter_critic.cost.currency"] = cost.currency
                attributes["adapter_critic.cost.total_known"] = cost.total_known
                if cost.total is not None:
                    attributes["adapter_critic.cost.total"] = cost.total
                if cost.unknown_stages:
                    attributes["adapter_critic.cost.unknown_stages"] = cost.unknown_stages
            if event.error is not None:
                error = event.error
                error_type = _kind(error) if isinstance(error, UpstreamError) else error.error_type
                attributes["error.type"] = error_type
                span.set_status(Status(StatusCode.ERROR, error_type))
            span.set_attributes(attributes)
        opened.close(_run)


def provider_is_set() -> bool:
    """Whether a tracer provider was set up (an SDK's): until then every span is dropped."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _kind(error: UpstreamError) -> str:
    """`error.type` of an upstream failure: the upstream's HTTP status, or how the call failed."""
    status = error.upstream_status
    return str(status) if error.kind == "status" and status is not None else error.kind


class _Inbound:
    """Continues the caller's trace for one request: the `traceparent` it sent (W3C Trace Context, and whatever
    propagators the host configured) becomes the current context, unless a span is already current (the host's
    own instrumentation made one)."""

    __slots__ = ("_scope", "_token")

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
        self._token: contextvars.Token[context.Context] | None = None

    def __enter__(self) -> None:
        if trace.get_current_span().get_span_context().is_valid:
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in self._scope.get("headers", ())
            if name in _PROPAGATED
        }
        if carrier:
            self._token = context.attach(propagate.extract(carrier))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            context.detach(self._token)
