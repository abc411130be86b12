"""The process's tracer, shared by the service and the fit workers (docs/operations.md, "Traces").

Off by default: `ON` is False and `tracer` is OpenTelemetry's no-op tracer, so code on a hot path checks
`tracing.ON` (one module attribute) and does nothing else. `install` (at start, from telemetry.config's
checked settings) builds the SDK's provider and turns it on; the SDK is imported only then.

A collector that is down or slow never holds up a request: spans go to the SDK's BatchSpanProcessor, whose
queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE) and exported from its own thread. A span that does not reach the
collector is counted through `on_drop(reason, n)`: `queue_full` when the queue had no room (the SDK drops
the oldest), `export_failed` when an export of a batch failed (after the exporter's own retries).
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from typing import Callable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .config import TraceConfig

log = logging.getLogger(__name__)
ON = False
tracer: trace.Tracer = trace.NoOpTracer()
provider = None  # the SDK's TracerProvider while on
SHUTDOWN_S = 2.0  # the most a stop waits for the last spans to leave
_propagator = TraceContextTextMapPropagator()
DropHook = Callable[[str, int], None]


def _sampler(config: TraceConfig):
    from opentelemetry.sdk.trace import sampling as s

    ratio = s.TraceIdRatioBased(config.ratio if config.ratio is not None else 1.0)
    return {
        "always_on": s.ALWAYS_ON,
        "always_off": s.ALWAYS_OFF,
        "parentbased_always_on": s.ParentBased(s.ALWAYS_ON),
        "parentbased_always_off": s.ParentBased(s.ALWAYS_OFF),
        "traceidratio": ratio,
        "parentbased_traceidratio": s.ParentBased(ratio),
    }[config.sampler]


def _exporter(config: TraceConfig, name: str):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(endpoint=config.endpoint, insecure=config.endpoint.startswith("http://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=config.endpoint)


def install(config: TraceConfig, service_name: str, on_drop: DropHook | None = None) -> None:
    """Trace from now on, with `config`; `service_name` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
    name the service. Replaces a provider installed before (shut down first)."""
    global ON, tracer, provider
    import os
    import socket

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from .spanqueue import CountingProcessor

    shutdown()
    attrs = {"host.name": socket.gethostname(), "process.pid": os.getpid()}
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not named:
        attrs["service.name"] = service_name
    # shutdown_on_exit=False: `shutdown` (bounded) is ours to call; the SDK's atexit hook could wait 30 s for a
    # collector that is down
    provider = TracerProvider(resource=Resource.create(attrs), sampler=_sampler(config), shutdown_on_exit=False)
    for name in config.exporters:
        provider.add_span_processor(
            CountingProcessor(
                _exporter(config, name),
                on_drop or (lambda reason, n: None),
                max_queue_size=config.queue_size,
                schedule_delay_millis=config.schedule_delay_ms,
                max_export_batch_size=config.batch_size,
                export_timeout_millis=config.export_timeout_ms,
            )
        )
    tracer = provider.get_tracer("inr-serve")
    ON = True
    log.info(
        "traces: %s to %s (%s), sampler %s",
        "+".join(config.exporters),
        config.endpoint,
        config.protocol,
        config.sampler,
    )


def shutdown(timeout_s: float = SHUTDOWN_S) -> None:
    """Stop tracing: what is queued gets up to `timeout_s` to leave (a collector that is down costs no more)."""
    global ON, tracer, provider
    current, provider, ON, tracer = provider, None, False, trace.NoOpTracer()
    if current is not None:
        stopper = threading.Thread(target=current.shutdown, name="otel-shutdown", daemon=True)
        stopper.start()
        stopper.join(timeout_s)


def flush(timeout_s: float = SHUTDOWN_S) -> None:
    if provider is not None:
        provider.force_flush(int(timeout_s * 1000))


def span(name: str, context: Context | None = None, attributes: dict | None = None, **kw):
    """`with span(...)`: a span made current, or nothing when traces are off (for code off the hot path)."""
    if not ON:
        return nullcontext()
    return tracer.start_as_current_span(name, context=context, attributes=attributes, **kw)


def annotate(attributes: dict) -> None:
    """Attributes on the current span (nothing when traces are off)."""
    if ON:
        trace.get_current_span().set_attributes(attributes)


def parent_from(traceparent: str | bytes | None, tracestate: str | bytes | None = None) -> Context | None:
    """The remote parent a W3C `traceparent` names; None (the span starts a new trace) when there is none or
    it is malformed."""
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent.decode("latin-1") if isinstance(traceparent, bytes) else traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate.decode("latin-1") if isinstance(tracestate, bytes) else tracestate
    ctx = _propagator.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def traceparent(s) -> str:
    """The W3C `traceparent` of span `s` (what a response answers, what a fit job record keeps)."""
    c = s.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The current span's `traceparent`; None when traces are off or no span is current."""
    if not ON:
        return None
    s = trace.get_current_span()
    return traceparent(s) if s.get_span_context().is_valid else None
