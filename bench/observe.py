"""What observability and the runtime cost a server (docs/benchmarks/serving.md): `python -m bench.observe SCENARIO`.

span_cost, gc_cost, trace_cost (bench.latency's floor harness), soak and flame (py-spy); `Receiver`: an OTLP receiver.
"""

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace as NS

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc

from .common import RESULTS, free_port, setup_logging, status_kib, write_json
from .serving import LUA, ROOT, Load, Server, machine, median, run_wrk, workloads, wrk


class Receiver:
    """opentelemetry-proto's TraceService/Export over gRPC and POST /v1/traces over HTTP on free ports, listening on
    `host` (0.0.0.0 for containers; the URLs name `advertise`): the export requests and the spans `span` keeps."""

    def __init__(self, host: str = "127.0.0.1", advertise: str | None = None):
        self.host, self.spans, self.requests, self.lock = host, [], 0, threading.Lock()
        self.grpc_port, self.http_port = free_port(), free_port()
        self.grpc_url = f"http://{advertise or host}:{self.grpc_port}"
        self.http_url = f"http://{advertise or host}:{self.http_port}/v1/traces"

    def span(self, resource_spans, s):  # its name; tests/otlp.py keeps a parsed Span
        return s.name

    def take(self, request: pb.ExportTraceServiceRequest) -> pb.ExportTraceServiceResponse:
        got = [self.span(rs, s) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        with self.lock:
            self.spans, self.requests = self.spans + got, self.requests + 1
        return pb.ExportTraceServiceResponse()

    def start(self) -> "Receiver":
        take = self.take

        class Http(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                out = take(pb.ExportTraceServiceRequest.FromString(body)).SerializeToString() if ok else b""
                self.send_response(200 if ok else 404 if self.path != "/v1/traces" else 415)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            log_message = lambda self, *args: None  # noqa: E731

        servicer = type("Grpc", (pb_grpc.TraceServiceServicer,), {"Export": lambda _, request, ctx: take(request)})
        pb_grpc.add_TraceServiceServicer_to_server(servicer(), grpc_server := grpc.server(ThreadPoolExecutor(4)))
        grpc_server.add_insecure_port(f"{self.host}:{self.grpc_port}")
        grpc_server.start()
        self.grpc, self.http = grpc_server, ThreadingHTTPServer((self.host, self.http_port), Http)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.grpc.stop(0)
        self.http.shutdown()
        self.http.server_close()


def span_cost(a) -> dict:
    """In-process CPU per request of service/server/spans.py around traced.py's span work, the ways interleaved."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased

    from service.engine import traced
    from service.server.spans import TraceRequests
    from telemetry import tracing

    scope = {"type": "http", "method": "POST", "path": "/v1/models/digits/classify", "headers": [(b"host", b"x")]}
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    body, model = {"type": "http.response.body", "body": b'{"classes": [7]}'}, NS(name="digits", version="1")

    async def nothing(message=None):
        pass

    async def plain(scope, receive, send):
        await send(start)
        await send(body)

    async def dataplane(scope, receive, send):
        with traced.infer_span(model, 1):
            item = NS(trace=traced.recording(), arrived=time.perf_counter())
            if (run := traced.start_run([item], 1, time.perf_counter())) is not None:
                run.end()
        await plain(scope, receive, send)

    class Discard(SpanExporter):  # counts the spans, encoding them into OTLP protobuf first with `encode`
        def export(self, spans):
            self.spans = getattr(self, "spans", 0) + len(spans)
            _ = self.encode and encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

    async def loop(app):
        for _ in range(a.requests):
            await app(scope, nothing, nothing)

    ratio, on, us, spans = ParentBased(TraceIdRatioBased(0.05)), ALWAYS_ON, {}, {}
    ways = {"off": None, "not sampled": ALWAYS_OFF, "1 in 20": ratio, "every span": on, "every span + OTLP": on}
    for _ in range(a.rounds):
        for way, sampler in ways.items():
            provider, exporter = TracerProvider(sampler=sampler, shutdown_on_exit=False), Discard()
            exporter.encode = sampler is ratio or "OTLP" in way
            provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))  # none dropped
            tracing.tracer, tracing.ON = provider.get_tracer("bench"), sampler is not None
            asyncio.run(loop(app := TraceRequests(dataplane) if sampler else plain))  # warm
            t0 = time.process_time()
            asyncio.run(loop(app))
            us.setdefault(way, []).append((time.process_time() - t0) / a.requests * 1e6)
            provider.shutdown()  # exports what is queued, in the CPU time of the next way: fine
            spans[way] = getattr(exporter, "spans", 0) / 2 / a.requests  # warm-up and timed run
            tracing.tracer, tracing.ON = trace.NoOpTracer(), False
    rows = [dict(way=w, us_per_request=median(v), us_rounds=v, spans_per_request=spans[w]) for w, v in us.items()]
    for r in rows:
        print(f"{r['way']:18s} {r['us_per_request']:7.1f} µs/request, {r['spans_per_request']:.2f} spans exported")  # noqa: T201
    return {"requests": a.requests, "rows": rows}


def one_load(label: str, coords: int = 2000) -> tuple[Load, Path]:
    """The first workload of bench.serving whose label starts with `label`, its body in a new folder; the script."""
    (tmp := Path(tempfile.mkdtemp(prefix="bench-observe-"))).joinpath("load.lua").write_text(LUA)
    w = next(w for w in workloads(ROOT / "models", "astronaut", "digits", coords) if w.label.startswith(label))
    (tmp / "body").write_bytes(w.body)
    return Load(w.label, w.paths["inr"], tmp / "body", ctype=w.ctype, ihcl=w.ihcl), tmp / "load.lua"


SAMPLERS = {"not sampled": "always_off", "1 in 20": "parentbased_traceidratio", "every span": "always_on"}


def otel(url: str, way: str, ratio: float = 0.05) -> dict:
    """The service's settings that export its traces to `url` over OTLP/gRPC, sampled the `way` of SAMPLERS."""
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": SAMPLERS[way]}
    return env | {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, "OTEL_TRACES_SAMPLER_ARG": str(ratio)}


HOOK = """import gc, json, os, threading, time
t0, stats, out = {}, {g: [0, 0.0] for g in "012"}, os.environ.get("GC_COST_OUT")
def timed(phase, info):
    g = str(info["generation"])
    if phase == "start": t0[g] = time.perf_counter()
    else: stats[g][0] += 1; stats[g][1] += time.perf_counter() - t0.pop(g, time.perf_counter())
def write():
    while not time.sleep(0.5): open(out + ".tmp", "w").write(json.dumps(stats)); os.replace(out + ".tmp", out)
if out: gc.callbacks.append(timed); threading.Thread(target=write, daemon=True).start()
"""


def gc_cost(a) -> dict:
    """The collections and their CPU per request of v1 classify, timed by HOOK in each server, tracing off and on."""
    load, script = one_load("v1 classify")
    (hook := script.parent / "hook").mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    receiver, rows = Receiver().start(), []
    try:
        for t, cwd in {"this tree": ROOT, **({"baseline": a.baseline} if a.baseline else {})}.items():
            for way in ("off", *SAMPLERS):
                env = {"PYTHONPATH": str(hook), "GC_COST_OUT": str(stats := hook / f"{len(rows)}.json")}
                env |= {"INR_THREADS": "1", **(otel(receiver.grpc_url, way) if way != "off" else {})}
                srv = Server(ROOT / "models", way, env, cwd=cwd).wait()
                try:
                    run_wrk(srv.url, load, a.clients, 1, script)  # warm-up
                    b0 = time.sleep(1.0) or json.loads(stats.read_text())
                    r = wrk(srv, load, a.clients, a.seconds, script)
                    b1 = time.sleep(1.0) or json.loads(stats.read_text())
                finally:
                    srv.stop()
                gen = {g: dict(collections=c - b0[g][0], ms=round((s - b0[g][1]) * 1e3, 1)) for g, (c, s) in b1.items()}
                row = dict(tree=t, way=way, requests=round(n := r["rps"] * a.seconds), rps=round(r["rps"]))
                row |= dict(cpu_ms_per_req=round(r["cpu_ms_per_req"], 3), generations=gen)
                rows.append(row | {"gc_ms_per_req": round(sum(v["ms"] for v in gen.values()) / n, 4)})
                print(f"{t} {way}: {json.dumps(rows[-1])}", flush=True)  # noqa: T201
    finally:
        receiver.stop()
    return {"seconds": a.seconds, "clients": a.clients, "rows": rows}


def trace_cost(a) -> dict:
    """bench.latency's floor harness, one-digit classify: tracing off (`adaptive`), `traced` (every span), `sampled`
    (--ratio), `before` (--baseline), `traced-old` and `sampled-old` (--compare); each over tracing off (`ratios`)."""
    from .latency import floor

    receiver, ways = Receiver().start(), {"traced": "every span", **({"sampled": "1 in 20"} if a.ratio else {})}
    old = ("", *([f"-old@{a.compare}"] if a.compare else []))
    env = {w: ",".join(f"{k}={v}" for k, v in otel(receiver.grpc_url, w, a.ratio).items()) for w in ways.values()}
    variants = [f"{n}{o}:{env[w]}" for o in old for n, w in ways.items()]
    setup = dict(models=ROOT / "models", loads="classify", policies=["adaptive"], variant=variants)
    try:
        result = floor(NS(**vars(a) | setup | {"concurrency": [int(c) for c in a.concurrency.split(",")]}))
    finally:
        receiver.stop()
    rows, ratios = {(r["load"], r["clients"], r["server"]): r for r in result["rows"]}, []
    for (load, clients, server), r in rows.items():
        if server not in ("adaptive", "floor") and (off := rows.get((load, clients, "adaptive"))):
            rps, cpu = round(r["rps"] / off["rps"], 3), round(r["cpu_ms_per_req"] / off["cpu_ms_per_req"], 3)
            ratios.append(dict(load=load, clients=clients, server=server, rps_over_off=rps, cpu_over_off=cpu))
            print(f"{load} c={clients} {server}: {rps:.3f}x the req/s of tracing off, {cpu:.3f}x its CPU/request")  # noqa: T201
    return result | {"spans_received": len(receiver.spans), "export_requests": receiver.requests, "ratios": ratios}


SOAK_LUA = """local f = io.open(os.getenv("SOAK_BODY"), "rb")
wrk.method = os.getenv("SOAK_METHOD")
if wrk.method == "POST" then wrk.body, wrk.headers["Content-Type"] = f:read("*a"), "application/json" end
f:close()
local lo, hi = os.getenv("SOAK_THINK"):match("(%d+),(%d+)")
if tonumber(hi) > 0 then delay = function() return math.random(tonumber(lo), tonumber(hi)) end end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %d, "duration_s": %.3f, "p50_ms": %.3f, "p99_ms": %.3f, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect, e.read, e.write, e.timeout, e.status))
end
"""
PRESETS = {"full": (60, 10, (16, 24, 16, 8)), "ci": (4, 1, (2, 2, 2, 2))}  # s measured, s warm-up, connections
KINDS, ERRORS = ("classify", "query", "render", "viewer"), ("connect", "read", "write", "timeout", "status")


def soak(a) -> dict:
    """Four wrk processes at once (`viewer` pauses 1-6 s): per --keep-alive, by kind, p50/p99, errors; server RSS."""
    (duration, warmup, n), runs, think = PRESETS[a.preset], [], (1000, 6000)
    loads, conns = {k: one_load(label)[0] for k, label in zip(KINDS, ("v1 classify", "v1 query"))}, dict(zip(KINDS, n))
    (script := loads["query"].body.with_name("soak.lua")).write_text(SOAK_LUA)
    render = Load("render", "/v1/models/astronaut/render?width=96&height=96&format=png", script, "GET")
    loads |= {"render": render, "viewer": render}

    def one(url: str, kind: str, seconds: float) -> dict:
        ms = "%d,%d" % (think if kind == "viewer" else (0, 0))
        env = {**os.environ, "SOAK_BODY": str(loads[kind].body), "SOAK_METHOD": loads[kind].method, "SOAK_THINK": ms}
        cmd = ["wrk", "-t1", f"-c{conns[kind]}", f"-d{seconds:g}s", "--timeout", "30s", "-s", str(script)]
        out = subprocess.run([*cmd, url + loads[kind].path], capture_output=True, text=True, env=env).stdout
        r = json.loads(out[out.index("RESULT ") + 7 :].splitlines()[0])
        return r | {"rps": r["requests"] / r["duration_s"]}

    def mixed(url: str, seconds: float) -> dict:
        with ThreadPoolExecutor(len(KINDS)) as pool:
            return dict(zip(KINDS, pool.map(lambda kind: one(url, kind, seconds), KINDS)))

    for ka in [float(v) for v in a.keep_alive.split(",") if v] or [None]:
        env = {"INR_THREADS": "1", **({"INR_TIMEOUT_KEEP_ALIVE": f"{ka:g}"} if ka else {})}
        server = Server(ROOT / "models", f"keep-alive {ka or 'default'}", env).wait()
        try:
            rss_warm = mixed(server.url, warmup) and status_kib(server.proc.pid, "VmRSS") / 1024
            cpu, t0, kinds = server.cpu_seconds(), time.monotonic(), mixed(server.url, duration)
            wall, cpu, rss_end = time.monotonic() - t0, server.cpu_seconds() - cpu, status_kib(server.proc.pid, "VmRSS")
        finally:
            server.stop()
        errors = {k: sum(r["errors"][k] for r in kinds.values()) for k in ERRORS}
        run = dict(keep_alive_s=ka, connections=sum(n), duration_s=duration, warmup_s=warmup, kinds=kinds)
        run |= dict(errors=errors, errors_total=sum(errors.values()), rss_warm_mib=rss_warm, rss_end_mib=rss_end / 1024)
        runs.append(run | dict(rss_growth=rss_end / 1024 / rss_warm - 1, server_cpu_share=cpu / wall, conns=conns))
    print(soak_table(runs))  # noqa: T201
    return {"think_ms": think, "runs": runs}


def soak_table(runs: list[dict]) -> str:
    lines = ["| keep-alive | type | conns | requests | req/s | p50 ms | p99 ms | errors c/r/w/t/s |"]
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for run in runs:
        ka = f"{run['keep_alive_s']:g} s" if run["keep_alive_s"] else "default"
        for kind, r in run["kinds"].items():
            e = "/".join(str(r["errors"][k]) for k in ERRORS)
            cells = f"{run['conns'][kind]} | {r['requests']} | {r['rps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f}"
            lines.append(f"| {ka} | {kind} | {cells} | {e} |")
        rss = f"RSS {run['rss_warm_mib']:.0f} → {run['rss_end_mib']:.0f} MiB ({run['rss_growth']:+.1%})"
        lines.append(f"| {ka} | **all** | {run['connections']} | | | | | **{run['errors_total']}**; {rss} |")
    return "\n".join(lines)


def flame(a) -> None:
    """py-spy (500 Hz, --format raw: collapsed stacks) on the service of --baseline or this tree under wrk."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if not spy or not a.out:
        raise SystemExit("flame needs --out FILE and py-spy (pip install py-spy)")
    load, script = one_load(a.load, a.coords)
    env = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "20000"}
    server = Server(ROOT / "models", "flame", env, cwd=a.baseline or ROOT).wait()
    try:
        run_wrk(server.url, load, a.clients, 1, script)
        r = ThreadPoolExecutor(1).submit(run_wrk, server.url, load, a.clients, a.seconds + 2, script)
        opts = ["--rate", "500", "--duration", str(a.seconds), "--format", a.format, "--output", str(a.out)]
        subprocess.run([spy, "record", "--pid", str(server.proc.pid), *opts, "--nonblocking"], check=True)
        rps = r.result()["rps"]
    finally:
        server.stop()
    print(f"{load.label}, {a.clients} client(s): {rps:.0f} req/s while sampled, load {os.getloadavg()[0]:.1f}")  # noqa: T201


OPTIONS = {  # each option's type is its default's (None: a path); all take --out NAME and --out-dir DIR too
    "span_cost": dict(requests=20000, rounds=3),
    "gc_cost": dict(baseline=None, seconds=5.0, clients=8),  # --baseline DIR: that checkout beside this one
    "trace_cost": dict(baseline=None, compare=None, rounds=3, gap=6.0, duration=3.0, concurrency="8", ratio=0.05),
    "soak": dict(preset="full", keep_alive=""),  # --keep-alive 5,90: INR_TIMEOUT_KEEP_ALIVE values in turn
    "flame": dict(out=None, load="v1 classify", coords=2000, clients=1, seconds=10, format="flamegraph", baseline=None),
}
CHOICES = {"preset": PRESETS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.observe", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, options in OPTIONS.items():
        s = sub.add_parser(name, description=globals()[name].__doc__)
        for k, v in {"out": name, "out_dir": RESULTS, **options}.items():
            kind = Path if v is None else type(v)  # a path, or the default's type
            s.add_argument("--" + k.replace("_", "-"), default=v, type=kind, choices=CHOICES.get(k))
    a, _ = p.parse_args(argv), setup_logging()
    info, command = machine(), " ".join(["python -m bench.observe", *(sys.argv[1:] if argv is None else argv)])
    if (result := globals()[a.scenario](a)) is not None:
        info["load_after"] = os.getloadavg()[0]
        write_json(a.out, {"machine": info, "command": command, **result}, a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
