"""What the OpenTelemetry SDK costs one request of ours, in-process, with no server and no network.

The real pure-ASGI layer (service/server/spans.py: the server span, `traceparent` in and out) around what the
dataplane does for one request alone in its batch (service/engine/traced.py: `inr.infer`, the batch's
`inr.run` and its links), on one event loop, ways side by side:

  - `off`: the same request without any of it (tracing.ON False: what the service runs by default);
  - `not sampled`: the SDK with `always_off` (what a request the sampler leaves out costs);
  - `1 in 20`: `parentbased_traceidratio` 0.05;
  - `every span`: `always_on`, spans to the SDK's BatchSpanProcessor, exported to nowhere;
  - `every span + OTLP`: the same, the exporter encoding each batch into OTLP protobuf as the OTLP exporters do
    (`encode_spans`, serialised), then dropping it: all the CPU an exporting service spends but the socket.

It is the floor under `bench.trace_cost` (the same on the real server over HTTP, which adds the allocator,
the collector and the caches of a whole process): the tracing budget was ≤ 5 % of a request.

    python -m bench.span_cost [--requests 20000]        # one line per way, µs per request
"""

from __future__ import annotations

import argparse
import asyncio
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from service.engine import traced
from service.server.spans import TraceRequests
from telemetry import tracing

SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/models/digits/classify",
    "headers": [(b"host", b"localhost"), (b"content-type", b"application/json")],
}
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
BODY = {"type": "http.response.body", "body": b'{"classes": [7]}'}


class Model:
    name, version = "digits", "1"


class Item:  # the batcher's Pending, as far as traced.py reads it
    trace = None
    arrived = 0.0


class Discard(SpanExporter):
    def __init__(self, encode: bool):
        self.encode, self.spans = encode, 0

    def export(self, spans):
        self.spans += len(spans)
        if self.encode:
            encode_spans(spans).SerializeToString()
        return SpanExportResult.SUCCESS


async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message):
    pass


async def dataplane(scope, receive, send):
    """One request's trace work in the dataplane: `inr.infer`, queued, alone in its batch's `inr.run`."""
    with traced.infer_span(Model, 1):
        item = Item()
        item.trace, item.arrived = traced.recording(), time.perf_counter()
        run = traced.start_run([item], 1, time.perf_counter())
        if run is not None:
            run.end()
    await send(START)
    await send(BODY)


async def plain(scope, receive, send):
    await send(START)
    await send(BODY)


def per_request(app, n: int) -> float:
    async def loop():
        for _ in range(n):
            await app(SCOPE, receive, send)

    asyncio.run(loop())  # warm
    start = time.process_time()
    asyncio.run(loop())
    return (time.process_time() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.span_cost", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    ways = {
        "not sampled": (sampling.ALWAYS_OFF, False),
        "1 in 20": (sampling.ParentBased(sampling.TraceIdRatioBased(0.05)), True),
        "every span": (sampling.ALWAYS_ON, False),
        "every span + OTLP": (sampling.ALWAYS_ON, True),
    }
    results: dict[str, list[float]] = {"off": []}
    spans: dict[str, int] = {}
    for _ in range(a.rounds):  # ways interleaved, round by round
        tracing.ON = False
        results["off"].append(per_request(plain, a.requests))
        for name, (sampler, encode) in ways.items():
            provider = TracerProvider(sampler=sampler, shutdown_on_exit=False)
            exporter = Discard(encode)
            provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))  # none dropped
            tracing.tracer, tracing.ON = provider.get_tracer("bench"), True
            results.setdefault(name, []).append(per_request(TraceRequests(dataplane), a.requests))
            provider.shutdown()  # exports what is queued, inside the process's CPU time of the next way: fine
            spans[name] = exporter.spans
            tracing.tracer, tracing.ON = trace.NoOpTracer(), False
    off = sorted(results["off"])[len(results["off"]) // 2]
    for name, values in results.items():
        us = sorted(values)[len(values) // 2]
        made = spans.get(name, 0) / (2 * a.requests) if name != "off" else 0.0
        print(f"{name:18s} {us:7.1f} µs/request  (+{us - off:6.1f} over off; {made:.2f} spans exported/request)")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
