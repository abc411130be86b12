"""The gRPC call's server span (docs/operations.md, "Traces"), made only while traces are on.

It continues a W3C `traceparent` (and `tracestate`) from the call's invocation metadata; a malformed one is
ignored and the span starts a new trace. The call answers `traceparent` with the server span's context in its
trailing metadata, which every call ends with, errors included. A stream (ModelStreamInfer) is one server
span, with each of its requests' `inr.infer` in it. Attributes: `rpc.system`, `rpc.service`,
`rpc.method`; a call that ends with an error status marks the span as an error.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import AsyncIterator, Awaitable, Callable

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from telemetry import tracing


@contextmanager
def server_span(service: str, method: str, context: grpc.aio.ServicerContext):
    parent = state = None
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            parent = value
        elif key == "tracestate":
            state = value
    span = tracing.tracer.start_span(  # by hand: cheaper than start_as_current_span's context manager
        f"{service}/{method}",
        context=tracing.parent_from(parent, state) if parent else None,
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    context.set_trailing_metadata((("traceparent", tracing.traceparent(span)),))
    try:
        yield span
    except BaseException as e:
        span.set_status(StatusCode.ERROR, str(e) or e.__class__.__name__)
        raise
    finally:
        otel_context.detach(token)
        span.end()


def traced(service: str, method: str, fn: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    """The unary method `fn(request, context)` in its server span."""

    async def call(request, context: grpc.aio.ServicerContext):
        with server_span(service, method, context):
            return await fn(request, context)

    return call


def traced_stream(service: str, method: str, fn: Callable[..., AsyncIterator]) -> Callable[..., AsyncIterator]:
    """The stream method `fn(requests, context)` (an async generator) in one server span."""

    async def call(requests, context: grpc.aio.ServicerContext):
        with server_span(service, method, context):
            async for answer in fn(requests, context):
                yield answer

    return call
