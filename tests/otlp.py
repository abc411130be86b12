"""A real OTLP trace receiver for the trace tests: bench.observe.Receiver (opentelemetry-proto's TraceService over
gRPC, POST /v1/traces over HTTP) with each span received as a `Span`, and the waits the tests make on them."""

from __future__ import annotations

import time
from collections import namedtuple

from bench import observe

# a received span: links are (trace id, span id), events (name, attributes); status 2 is an error
Span = namedtuple("Span", "name trace_id span_id parent_id service kind start_ns end_ns attributes links events status")


def _kv(kvs) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value") or "", None) for kv in kvs}


class Receiver(observe.Receiver):
    """bench.observe.Receiver, its `spans` as `Span`s in arrival order."""

    def span(self, resource_spans, s) -> Span:
        service = _kv(resource_spans.resource.attributes).get("service.name", "")
        ids = [i.hex() for i in (s.trace_id, s.span_id, s.parent_span_id)]
        times = (s.start_time_unix_nano, s.end_time_unix_nano)
        links = [(k.trace_id.hex(), k.span_id.hex()) for k in s.links]
        events = [(e.name, _kv(e.attributes)) for e in s.events]
        return Span(s.name, *ids, service, s.kind, *times, _kv(s.attributes), links, events, s.status.code)

    def trace(self, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def wait_trace(self, trace_id: str, *names: str, timeout: float = 30.0) -> list[Span]:
        """The spans of `trace_id` once one of each of `names` has arrived."""
        self.wait(lambda rc: {s.name for s in rc.trace(trace_id)} >= set(names), timeout, f"{names} in {trace_id}")
        return self.trace(trace_id)

    def wait(self, condition, timeout: float = 30.0, what: str = "spans"):
        """Poll `condition(self)` until truthy (returned); AssertionError naming what was received."""
        deadline = time.monotonic() + timeout
        while not (value := condition(self)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not value:
            names = sorted({s.name for s in self.spans})
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; {len(self.spans)} spans: {names}")
        return value
