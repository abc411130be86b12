"""The SDK's BatchSpanProcessor, with every span that does not reach the collector counted (telemetry.tracing).

Two ways a span is lost: the bounded queue is full when it ends (the SDK drops one and reports it to its
processor metrics: `queue_full`), or the export of its batch fails once the exporter's retries are spent
(`export_failed`). The first is read from the SDK's processor-metrics hook, the second from the exporter's
result; both go to `on_drop(reason, count)`.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

log = logging.getLogger(__name__)
DropHook = Callable[[str, int], None]


class CountingExporter(SpanExporter):
    """Counts the spans of each batch whose export failed (or raised), then answers as the exporter did."""

    def __init__(self, inner: SpanExporter, on_drop: DropHook):
        self.inner, self.on_drop = inner, on_drop

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - the processor would log and lose them the same way
            log.warning("trace export raised; %d spans dropped", len(spans), exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.on_drop("export_failed", len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _DropHook:
    """The SDK's processor metrics (ProcessorMetricsT), passed through, with drops also counted here."""

    def __init__(self, inner, on_drop: DropHook):
        self.inner, self.on_drop = inner, on_drop

    def register_queue_size(self, get_queue_size) -> None:
        self.inner.register_queue_size(get_queue_size)

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        self.on_drop(error_type, count)
        self.inner.drop_items(count, error_type)

    def finish_items(self, count: int) -> None:
        self.inner.finish_items(count)


class CountingProcessor(BatchSpanProcessor):
    def __init__(self, exporter: SpanExporter, on_drop: DropHook, **options):
        super().__init__(CountingExporter(exporter, on_drop), **options)
        batch = getattr(self, "_batch_processor", None)  # the SDK's shared BatchProcessor (opentelemetry-sdk 1.3x+)
        if batch is not None and hasattr(batch, "_metrics"):
            batch._metrics = _DropHook(batch._metrics, on_drop)
        else:
            log.warning(
                "this opentelemetry-sdk's BatchSpanProcessor reports no queue drops; only failed exports "
                "are counted in inr_trace_spans_dropped_total"
            )
