"""The dataplane's spans (docs/operations.md, "Traces"), made only while traces are on (telemetry.tracing.ON)
and only for a request whose own span records (a sampled trace): a request the sampler left out costs one
check here, not three spans that would be dropped.

* `inr.infer`: one per request that reaches the batcher (query, classify, V2 infer over HTTP or gRPC), a
  child of the request's server span; attributes `inr.model`, `inr.model.version`, `inr.rows`, and once its
  run starts `inr.batch.size` (requests in that run) and `inr.queue.seconds` (its wait for the run), with a
  link to the run's `inr.run`.
* `inr.run`: one onnxruntime run, made once per batch: a child of the batch's oldest traced request's
  `inr.infer`, linked to every traced request's `inr.infer` (so each request reaches the run, and the run
  each request); attributes `inr.batch.size`, `inr.batch.rows`. A request that runs alone or on the event
  loop has its own `inr.run`, a plain child.

The wait for a batch was its own span (`inr.queue`) until the trace budget was measured: each span
costs the SDK about 80 µs to record and 130 µs to encode (bench/span_cost.py), so the wait is two attributes.
With traces off, `DataPlane` uses the plain `BatchingInference` (not `TracedBatching`), and the batcher's only
trace work is a check of `tracing.ON` where a request is queued, runs alone or on the loop, and a batch starts.
"""

from __future__ import annotations

from contextlib import nullcontext

from opentelemetry import trace
from opentelemetry.trace import Link

from telemetry import tracing

NO_SPAN = nullcontext()  # reusable: it holds no state


def recording():
    """The current span if it records (its trace was sampled), else None."""
    span = trace.get_current_span()
    return span if span.is_recording() else None


def infer_span(model, rows: int):
    """`with infer_span(model, rows)`: the request's `inr.infer`, made current (dataplane.TracedBatching), or
    nothing when the request's trace is not sampled."""
    if not trace.get_current_span().is_recording():
        return NO_SPAN
    return tracing.tracer.start_as_current_span(
        "inr.infer", attributes={"inr.model": model.name, "inr.model.version": model.version, "inr.rows": rows}
    )


def start_run(batch: list, rows: int, started: float):
    """The batch's `inr.run` span, or None when no request in it is traced; each traced request's `inr.infer`
    gets the batch size, its wait and a link to the run."""
    traced = [p for p in batch if p.trace is not None]
    if not traced:
        return None
    run = tracing.tracer.start_span(
        "inr.run",
        context=trace.set_span_in_context(traced[0].trace),
        links=[Link(p.trace.get_span_context()) for p in traced],
        attributes={"inr.batch.size": len(batch), "inr.batch.rows": rows},
    )
    ctx = run.get_span_context()
    for p in traced:
        p.trace.set_attributes({"inr.batch.size": len(batch), "inr.queue.seconds": started - p.arrived})
        p.trace.add_link(ctx)
    return run


def run_span(rows: int):
    """`with run_span(rows)`: a request's own `inr.run` (alone, or on the event loop), in the current context,
    when tracing is on and that context's span records; else a context that does nothing."""
    if not tracing.ON:
        return NO_SPAN
    span = trace.get_current_span()
    if not span.is_recording():
        return NO_SPAN
    span.set_attributes({"inr.batch.size": 1, "inr.queue.seconds": 0.0})
    return tracing.tracer.start_as_current_span("inr.run", attributes={"inr.batch.size": 1, "inr.batch.rows": rows})
