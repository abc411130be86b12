"""The dataplane's spans (docs/deployment.md, "Traces"), made only while traces are on (modelrepo.tracing.ON).

* `inr.infer`: one per request that reaches the batcher (query, classify, V2 infer over HTTP or gRPC), a
  child of the request's server span; attributes `inr.model`, `inr.model.version`, `inr.rows`.
* `inr.queue`: the request's wait in its model's queue, a child of `inr.infer`, ended when its batch starts,
  with `inr.batch.size` (requests in that batch) and a link to the batch's `inr.run`.
* `inr.run`: one onnxruntime run, made once per batch: a child of the batch's oldest request's `inr.infer`,
  linked to every request's `inr.infer` (so each request reaches the run, and the run each request);
  attributes `inr.batch.size`, `inr.batch.rows`. A request that runs alone or on the event loop has its
  own `inr.run`, a plain child.

With traces off, `DataPlane` uses the plain `BatchingInference` (not `TracedBatching`), and the batcher's only
trace work is a check of `tracing.ON` where a request is queued, runs alone or on the loop, and a batch starts.
"""
from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, StatusCode

from modelrepo import tracing


def infer_span(model, rows: int):
    """`with infer_span(model, rows)`: the request's `inr.infer`, made current (dataplane.TracedBatching)."""
    return tracing.tracer.start_as_current_span("inr.infer", attributes={
        "inr.model": model.name, "inr.model.version": model.version, "inr.rows": rows})


def queue_span():
    """(the `inr.queue` span, the request's context) for a request entering its model's queue."""
    return tracing.tracer.start_span("inr.queue"), otel_context.get_current()


def start_run(batch: list, rows: int):
    """The batch's `inr.run` span; each request's `inr.queue` ends with the batch size and a link to it."""
    links = [Link(trace.get_current_span(p.trace[1]).get_span_context()) for p in batch if p.trace]
    parent = next((p.trace[1] for p in batch if p.trace), None)
    run = tracing.tracer.start_span("inr.run", context=parent, links=links,
                                    attributes={"inr.batch.size": len(batch), "inr.batch.rows": rows})
    ctx = run.get_span_context()
    for p in batch:
        if p.trace:
            span = p.trace[0]
            span.set_attribute("inr.batch.size", len(batch))
            span.add_link(ctx)
            span.end()
    return run


def end_queue(item, error: str | None = None) -> None:
    """A request that left the queue without a batch (deadline, shutdown, client gone)."""
    if item.trace:
        span = item.trace[0]
        if error:
            span.set_status(StatusCode.ERROR, error)
        span.end()
        item.trace = None


def run_span(rows: int):
    """`with run_span(rows)`: a request's own `inr.run` (alone, or on the event loop), in the current context."""
    return tracing.tracer.start_as_current_span("inr.run", attributes={"inr.batch.size": 1, "inr.batch.rows": rows})
