"""KServe V2 over gRPC against HTTP (docs/benchmarks/serving.md): `python -m bench.rpc SCENARIO [options]`.

grpc_http: client processes against the service; grpc_profile: py-spy on it; grpc_ours: its CPU per call in-process."""

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import DEVNULL, run
from types import SimpleNamespace

import grpc
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.grpc import service_pb2 as pb

from .common import RESULTS, ROOT, free_port, median, setup_logging, write_json
from .serving import Server

SERVICE, COORDS, THREADS = "inference.GRPCInferenceService", ("astronaut", "coords"), ("--threads", "1")
WORKLOADS = {"2,000 coordinates": (*COORDS, (2000, 2)), "20,000 coordinates": (*COORDS, (20000, 2))}
WORKLOADS["one digit"] = ("digits", "images", (1, 1, 28, 28))
_CATEGORIES = """model (onnxruntime)=onnxruntime/
protobuf parse / serialise=FromString SerializeToString google/protobuf/
ours: gRPC servicer wrapper=api/grpc/servicer.py|ours: gRPC ↔ V2 conversion=api/grpc/convert.py
ours: V2 checks and tensors=api/v2/|ours: dataplane and batching=service/engine/|ours: metrics=service/metrics/
prometheus_client=prometheus_client/|ours: HTTP layers (server/, app)=service/server/ service/app.py
Starlette / FastAPI=starlette/ fastapi/|uvicorn (the HTTP floor)=uvicorn/ httptools
grpc.aio (Python side of the call machinery)=grpc/aio/|grpc (sync server)=grpc/_server.py|grpc (other)=grpc/
asyncio / threads=asyncio/ threading.py concurrent/|numpy=numpy/"""
# a py-spy sample's category: the first whose texts one of its frames has, from the innermost frame outwards
CATEGORIES = {k: v.split() for k, v in (kv.split("=") for kv in _CATEGORIES.replace("\n", "|").split("|"))}


def client_loop(protocol: str, url: str, model: str, name: str, shape: tuple, fresh: bool, ready, window, counts):
    """One client process: infers until the window's end, counting answers and errors after its start."""
    lib, rng = tg if protocol == "grpc" else th, np.random.default_rng()
    c, t, n, errors = lib.InferenceServerClient(url), lib.InferInput(name, list(shape), "FP32"), 0, 0
    t.set_data_from_numpy(rng.random(shape, dtype=np.float32))
    c.infer(model, [t])  # connected, first call made
    ready.wait()  # every client is set up
    ready.wait()  # the window is set
    while time.time() < window[1]:
        if fresh:
            t.set_data_from_numpy(rng.random(shape, dtype=np.float32))
        try:
            n += bool(c.infer(model, [t])) and time.time() >= window[0]
        except Exception:
            errors += 1
    counts.put((n, errors))


def measure(server: Server, protocol: str, workload: str, clients: int, duration: float) -> dict:
    """`clients` processes for `duration` s after a 1 s warm-up (", never repeat": new values every request)."""
    url, (base, _, fresh) = server.grpc_url if protocol == "grpc" else server.url[7:], workload.partition(", never")
    counts, ready, window = mp.Queue(), mp.Barrier(clients + 1), mp.Array("d", 2)
    args = (protocol, url, *WORKLOADS[base], bool(fresh), ready, window, counts)
    procs = [mp.Process(target=client_loop, args=args) for _ in range(clients)]
    [p.start() for p in procs]
    ready.wait(timeout=300)
    window[:] = [start := time.time() + 1.0, start + duration]  # a warm-up second once every client is connected
    ready.wait(timeout=60)
    time.sleep(max(0.0, window[0] - time.time()))
    cpu0 = server.cpu_seconds()
    time.sleep(max(0.0, window[1] - time.time()))
    cpu, (n, errors) = server.cpu_seconds() - cpu0, map(sum, zip(*[counts.get(timeout=120) for _ in procs]))
    [p.join(60) for p in procs]
    out = dict(protocol=protocol, workload=workload, clients=clients, req_s=n / duration, errors=errors)
    return out | {"cpu_ms": cpu * 1e3 / max(n, 1)}


class GrpcFloor(Server):
    """`serve_floor` in a process of its own, with the Server's cpu_seconds; the answers: {"MODEL ROWS": bytes}."""

    def __init__(self, answers: dict, sync: bool):
        self.name, self.grpc_url = "gRPC floor", f"127.0.0.1:{free_port()}"
        self.proc = mp.get_context("spawn").Process(target=serve_floor, args=(answers, sync, self.grpc_url))
        self.proc.start()

    def wait(self, timeout: float = 60) -> "GrpcFloor":
        with grpc.insecure_channel(self.grpc_url) as channel:
            return grpc.channel_ready_future(channel).result(timeout=timeout) or self

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join()


def floors(service: Server, workloads: dict[str, tuple]) -> list[tuple[str, str, Server]]:
    """The HTTP and the two gRPC floors, answering with `service`'s own answer bytes: (name, protocol, server)."""
    from .latency import FloorServer

    http, answers = {}, {}
    for model, name, shape in workloads.values():
        if (path := f"/v2/models/{model}/infer") in http:
            raise SystemExit(f"--floor: one workload per model ({model} twice)")
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        inputs = [m.InferInput(name, [*shape], "FP32") for m in (th, tg)]
        [i.set_data_from_numpy(x) for i in inputs]
        body, size = th.InferenceServerClient.generate_request_body(inputs[:1])
        http[path] = (body, "application/octet-stream", "" if size is None else str(size))
        with tg.InferenceServerClient(service.grpc_url) as c:
            answers[f"{model} {shape[0]}"] = c.infer(model, inputs[1:]).get_response().SerializeToString()
    started = [("HTTP floor", "http", FloorServer(service.url, http).wait())]
    return started + [(f"gRPC floor ({k})", "grpc", GrpcFloor(answers, k == "sync").wait()) for k in ("aio", "sync")]


def serve_floor(answers: dict, sync: bool, address: str) -> None:
    """ModelInfer answered with the answer's bytes, the request parsed; grpc.aio on uvloop or (`sync`) grpc.server."""
    import uvloop

    answer = lambda request, context: answers[f"{request.model_name} {request.inputs[0].shape[0]}"]  # noqa: E731

    async def infer(request, context):
        return answer(request, context)

    method = grpc.unary_unary_rpc_method_handler(answer if sync else infer, pb.ModelInferRequest.FromString)
    handlers = [grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": method})]
    if sync:
        (server := grpc.server(ThreadPoolExecutor(max_workers=8), handlers)).add_insecure_port(address)
        return server.start() or server.wait_for_termination()

    async def serve() -> None:  # grpc.aio's server belongs to the loop it is made in
        (server := grpc.aio.server(handlers=handlers)).add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    uvloop.run(serve())


def wide(rows: list[dict], names: list[str]) -> str:
    """Per workload and clients: each target's req/s (server CPU ms/req, × the first target's req/s)."""
    by = {(r["workload"], r["clients"], r["target"]): r for r in rows}
    lines = ["| workload | clients | " + " | ".join(names) + " | errors |", "|---|---:|" + "---:|" * (len(names) + 1)]
    for w, c in dict.fromkeys((r["workload"], r["clients"]) for r in rows):
        cols = [by[(w, c, n)] for n in names]
        first, errors = cols[0]["req_s"] or 1, sum(x["errors"] for x in cols)
        cells = [f"{x['req_s']:.0f} ({x['cpu_ms']:.2f}, {x['req_s'] / first:.2f}×)" for x in cols]
        lines.append(f"| {w} | {c} | " + " | ".join(cells) + f" | {errors} |")
    return "\n".join(lines)


def grpc_http(a) -> dict:
    """Every target on every workload and client count, the order rotating by round; each cell's median round."""
    servers, targets = {"": Server(a.models, "grpc-http", args=THREADS)}, [("HTTP binary", "", "http")]
    targets.append(("gRPC", "", "grpc"))
    if a.baseline:
        servers["before"] = Server(a.models, "before", args=THREADS, cwd=a.baseline)
        targets += [("before: HTTP binary", "before", "http"), ("before: gRPC", "before", "grpc")]
    for name, _, pairs in (v.partition(":") for v in a.variant):
        servers[name] = Server(a.models, name, dict(kv.split("=", 1) for kv in pairs.split(",") if kv), args=THREADS)
        targets.append((f"gRPC, {name}", name, "grpc"))
    workloads = a.workload or [w + ", never repeat" * f for f in (0, 1) for w in [*WORKLOADS][:2]] if a.cache else []
    workloads = workloads or a.workload or list(WORKLOADS)
    if a.cache:  # the response cache: a copy of astronaut with it on, HTTP binary, the same tensor or new ones
        shutil.copytree(a.models / "astronaut", (repo := Path(tempfile.mkdtemp())) / "astronaut")
        cfg = repo / "astronaut" / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "response_cache {\n  enable: true\n}\n")
        servers["on"] = Server(repo, "cache-on", args=(*THREADS, "--cache-config", "local,size=268435456"))
        targets = [("cache off", "", "http"), ("cache on", "on", "http")]
    results: dict[tuple, list[dict]] = {}
    try:
        [s.wait() for s in servers.values()]
        for name, protocol, server in floors(servers[""], {w: WORKLOADS[w] for w in workloads}) if a.floor else ():
            servers[name] = server
            targets.append((name, name, protocol))
        for rnd, w, c in ((r, w, c) for r in range(a.rounds) for w in workloads for c in a.clients):
            for label, name, protocol in targets[rnd % len(targets) :] + targets[: rnd % len(targets)]:
                results.setdefault((w, c, label), []).append(r := measure(servers[name], protocol, w, c, a.duration))
                print(f"{w} c={c} {label}: {r} (load {os.getloadavg()[0]:.1f})", flush=True)  # noqa: T201
    finally:
        [s.stop() for s in servers.values()]
    rows = [{**sorted(rs, key=lambda r: r["req_s"])[len(rs) // 2], "target": k[2]} for k, rs in results.items()]
    rows = [{**row, "errors": sum(r["errors"] for r in rs)} for row, rs in zip(rows, results.values())]
    return {"rows": rows, "table": wide(rows, [t[0] for t in targets])}


def summarise(raw: str) -> Counter:
    """py-spy's collapsed stacks ("frame;frame;... count" per line) → samples by category."""
    out: Counter = Counter()
    for stack, _, count in (line.rpartition(" ") for line in raw.splitlines()):
        found = (k for f in reversed(stack.split(";")) for k, v in CATEGORIES.items() if any(n in f for n in v))
        out[next(found, "other")] += int(count) if stack and count.isdigit() else 0
    return +out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the process by thread name (Python's threads are all "python")."""
    tick, out = os.sysconf("SC_CLK_TCK"), Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields, name = (task / "stat").read_text().rsplit(")", 1)[1].split(), (task / "comm").read_text().strip()
        except OSError:
            continue
        name = "main (the event loop)" if task.name == str(pid) else name.rstrip("0123456789-_") or name
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def grpc_profile(a) -> dict:
    """py-spy on the server (idle samples left out) under `a.clients` clients, and each server thread's CPU."""
    if not (spy := shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.getenv('PATH')}")):
        raise SystemExit("grpc_profile: py-spy not found (pip install py-spy)")
    server = Server(a.models, "profile", dict(kv.split("=", 1) for kv in a.env), args=THREADS).wait()
    raw, pid, w = Path(tempfile.mkdtemp(prefix="bench-profile-")) / "stacks.txt", server.proc.pid, a.workload[0]
    try:
        load = ThreadPoolExecutor(1).submit(measure, server, a.protocol, w, a.clients, a.seconds + 2)
        time.sleep(4)  # measure() starts the clients, waits for each one's first call, then warms up for 1 s
        before, opts = thread_cpu(pid), f"--pid {pid} --rate {a.rate} --duration {a.seconds} --format raw --nonblocking"
        run([spy, "record", *opts.split(), "--output", str(raw)], check=True, stdout=DEVNULL, stderr=DEVNULL)
        threads, result = {k: v - before.get(k, 0) for k, v in thread_cpu(pid).items()}, load.result()
    finally:
        server.stop()
    samples, env = summarise(raw.read_text()), ",".join(a.env) or "-"
    lines = [f"{a.protocol}, {w}, {a.clients} client(s), env {env}: {result['req_s']:.0f} req/s, server CPU "]
    lines[0] += f"{result['cpu_ms']:.2f} ms/req, load {os.getloadavg()[0]:.1f}"
    lines += ["", "| where (innermost frame) | share of samples |", "|---|---:|"]
    lines += [f"| {k} | {v / sum(samples.values()):.1%} |" for k, v in samples.most_common()]
    lines += ["", "| server thread | CPU s while sampled |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0]
    return {"samples": dict(samples), "threads": threads, **result, "table": "\n".join(lines)}


async def grpc_ours(a) -> dict:
    """CPU µs per call of the gRPC servicer, the HTTP route's core and the model, medians of 9 rotating batches."""
    from service.api.grpc.servicer import InferenceService, reader
    from service.api.v2.infer import infer, resolve
    from service.api.v2.tensors import parse_request
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(models=a.models, grpc_port=0, threads=1, log_level="error", model_loading="startup"))
    context, state = SimpleNamespace(time_remaining=lambda: None, invocation_metadata=tuple), app.state
    head = "| workload | model alone µs | HTTP route core µs (above the model) | gRPC servicer µs (above the model) |"
    lines = [head, "|---|---:|---:|---:|"]
    async with app.router.lifespan_context(app):
        for w in a.workload or ["2,000 coordinates", "one digit"]:
            model_name, name, shape = WORKLOADS[w]
            x = np.random.default_rng(0).random(shape, dtype=np.float32)
            msg = pb.ModelInferRequest(model_name=model_name, raw_input_contents=[x.tobytes()])
            msg.inputs.add(name=name, datatype="FP32", shape=list(shape))
            (t := th.InferInput(name, list(shape), "FP32")).set_data_from_numpy(x)
            (body, size), wire = th.InferenceServerClient.generate_request_body([t]), msg.SerializeToString()
            service, model = InferenceService(state), resolve(state.registry, model_name, None, ready=True)

            async def grpc_call(read=reader(pb.ModelInferRequest)):
                return (await service.ModelInfer(read(wire), context)).SerializeToString()

            async def http_call():
                state.drain.inflight += 1  # as DrainGuard counts it
                try:
                    request, model = parse_request(body, str(size)), resolve(state.registry, model_name, None, True)
                    return await infer(request, model, state.dataplane)
                finally:
                    state.drain.inflight -= 1

            async def model_call():
                return model.predict(x)

            fns, per = {"model alone": model_call, "HTTP route core": http_call, "gRPC servicer": grpc_call}, {}
            [await fn() for fn in fns.values() for _ in range(50)]
            for b, label in ((b, k) for b in range(9) for k in [*fns][b % 3 :] + [*fns][: b % 3]):
                c0 = time.process_time()
                [await fns[label]() for _ in range(a.calls // 9)]
                per.setdefault(label, []).append((time.process_time() - c0) * 1e6 / (a.calls // 9))
            m, h, g = (median(per[k]) for k in fns)
            lines.append(f"| {w} | {m:.0f} | {h:.0f} ({h - m:.0f}) | {g:.0f} ({g - m:.0f}) |")
    return {"table": "\n".join(lines)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rpc", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    http, profile, ours = (sub.add_parser(n) for n in ("grpc_http", "grpc_profile", "grpc_ours"))
    for s in (http, profile, ours):
        s.add_argument("--models", type=Path, default=ROOT / "models")
        s.add_argument("--out", type=Path, default=RESULTS / f"{s.prog.split()[-1]}.json", help="the result file")
        s.add_argument("--workload", action="append", choices=list(WORKLOADS), help="repeatable (grpc_profile: one)")
    http.add_argument("--clients", type=lambda t: [int(v) for v in t.split(",")], default=[1, 8])
    http.add_argument("--variant", action="append", default=[], help="NAME:K=V,...: the service with these settings")
    http.add_argument("--baseline", type=Path, help="also the service of this checkout")
    http.add_argument("--floor", action="store_true", help="also the HTTP and gRPC floors")
    http.add_argument("--cache", action="store_true", help="the response cache on and off instead of the protocols")
    profile.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    profile.add_argument("--env", action="append", default=[], help="K=V: a setting of the server")
    nums = {http: dict(duration=4.0, rounds=3), profile: dict(clients=1, seconds=10, rate=500), ours: dict(calls=2000)}
    [s.add_argument(f"--{k}", type=type(v), default=v) for s, kv in nums.items() for k, v in kv.items()]
    a, _ = p.parse_args(argv), setup_logging()
    a.workload = a.workload or ["2,000 coordinates"] if a.scenario == "grpc_profile" else a.workload
    result = asyncio.run(grpc_ours(a)) if a.scenario == "grpc_ours" else globals()[a.scenario](a)
    write_json(a.out.stem, result, a.out.parent)
    print(result["table"])  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
