"""`python -m benchmarks.with_otel_sdk <uvicorn args>`: uvicorn with an OpenTelemetry SDK tracer provider set up
as a deployment would (a batch span processor), exporting to nowhere: what recording every span costs."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(Discard()))
trace.set_tracer_provider(provider)

import uvicorn.main  # noqa: E402

if __name__ == "__main__":
    uvicorn.main.main()
