"""A real OTLP trace receiver for the tests and `bench.trace_cost`: the collector's protocol from
`opentelemetry-proto`'s service
definitions, over gRPC (`TraceService/Export` on a grpc server) and over HTTP (`POST /v1/traces` with an
`ExportTraceServiceRequest` protobuf body), on free ports. What it receives is kept as `Span`s, and
`tree()` prints them as the trace's tree (docs/deployment.md shows one)."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc

from bench.serving import free_port


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict
    links: list[tuple[str, str]]  # (trace id, span id)
    events: list[tuple[str, dict]] = field(default_factory=list)
    status: int = 0  # 2 = error

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver:
    """Spans received by both endpoints, in arrival order; `grpc_url` and `http_url` to export to."""

    def __init__(self, host: str = "127.0.0.1", advertise: str | None = None):
        """Listens on `host` (0.0.0.0 for containers); the URLs name `advertise` (default: `host`)."""
        self.host, name = host, advertise or host
        self.spans: list[Span] = []
        self.requests = 0
        self.lock = threading.Lock()
        self.grpc_port, self.http_port = free_port(), free_port()
        self.grpc_url = f"http://{name}:{self.grpc_port}"
        self.http_url = f"http://{name}:{self.http_port}/v1/traces"

    def take(self, request: pb.ExportTraceServiceRequest) -> None:
        got = []
        for rs in request.resource_spans:
            service = _attrs(rs.resource.attributes).get("service.name", "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            service,
                            s.kind,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                            _attrs(s.attributes),
                            [(lk.trace_id.hex(), lk.span_id.hex()) for lk in s.links],
                            [(e.name, _attrs(e.attributes)) for e in s.events],
                            s.status.code,
                        )
                    )
        with self.lock:
            self.spans.extend(got)
            self.requests += 1

    def start(self) -> "Receiver":
        receiver = self

        class Service(pb_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.take(request)
                return pb.ExportTraceServiceResponse()

        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_TraceServiceServicer_to_server(Service(), self.grpc)
        self.grpc.add_insecure_port(f"{self.host}:{self.grpc_port}")
        self.grpc.start()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404 if self.path != "/v1/traces" else 415)
                    self.end_headers()
                    return
                receiver.take(pb.ExportTraceServiceRequest.FromString(body))
                out = pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer((self.host, self.http_port), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.grpc.stop(0)
        self.http.shutdown()
        self.http.server_close()

    # -- reading ------------------------------------------------------------------------------------
    def trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def wait_trace(self, trace_id: str, *names: str, timeout: float = 30.0) -> list[Span]:
        """The spans of `trace_id` once one of each of `names` has arrived."""
        self.wait(lambda rc: {s.name for s in rc.trace(trace_id)} >= set(names), timeout, f"{names} in {trace_id}")
        return self.trace(trace_id)

    def wait(self, condition, timeout: float = 30.0, what: str = "spans"):
        """Poll `condition(self)` until truthy (returned); AssertionError naming what was received."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition(self)
            if value:
                return value
            time.sleep(0.1)
        names = sorted({s.name for s in self.spans})
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what}; received {len(self.spans)} spans: {names}"
        )


def tree(spans: list[Span]) -> str:
    """The spans as an indented tree by parent (roots: spans whose parent is not among them), with the
    service, duration, a few attributes, and the links and events."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(s.parent_id if s.parent_id in ids else "", []).append(s)
    lines = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            attrs = " ".join(
                f"{k}={v}"
                for k, v in s.attributes.items()
                if k.startswith(("inr.", "http.route", "http.response", "rpc."))
            )
            lines.append(f"{'  ' * depth}{s.name} [{s.service}] {s.ms:.1f} ms {attrs}".rstrip())
            for name, attributes in s.events:
                lines.append(f"{'  ' * (depth + 2)}event {name} {attributes}")
            if s.links:
                lines.append(f"{'  ' * (depth + 2)}links to {len(s.links)} span(s)")
            walk(s.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)
