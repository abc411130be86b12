"""The cyclic garbage collector's share of a request: collections and their CPU, counted inside the server.

Each service runs with a `sitecustomize` (written here, put on its PYTHONPATH) that times every collection
through `gc.callbacks` and writes the totals per generation to a file once a second. Under `--seconds` of
one-digit v1 classify at `--clients`, the difference of two readings gives collections and milliseconds per
request. The ways: tracing off, and on with nothing sampled, one trace in 20, and every span (OTLP/gRPC to the
receiver of bench/otlp.py); with `--baseline DIR`, the same four of another checkout (its own collector
settings: service/server/heap.py's, or CPython's defaults before it).

    python -m bench.gc_cost --baseline ../before          # bench/results/gc_cost.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from .otlp import Receiver
from .peers_loads import workloads
from .serving import LUA, ROOT, Load, Server, machine, run_wrk, wrk

HOOK = """import gc, json, os, threading, time
_start, _stats = {}, {"0": [0, 0.0], "1": [0, 0.0], "2": [0, 0.0]}
def _timed(phase, info):
    g = str(info["generation"])
    if phase == "start":
        _start[g] = time.perf_counter()
    else:
        _stats[g][0] += 1
        _stats[g][1] += time.perf_counter() - _start.pop(g, time.perf_counter())
def _write():
    while True:
        time.sleep(0.5)
        path = os.environ["GC_COST_OUT"]
        with open(path + ".tmp", "w") as f:
            json.dump(_stats, f)
        os.replace(path + ".tmp", path)
if os.environ.get("GC_COST_OUT"):
    gc.callbacks.append(_timed)
    threading.Thread(target=_write, daemon=True).start()
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gc_cost", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="another checkout, measured the same ways")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gc_cost.json")
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    (tmp / "hook").mkdir()
    (tmp / "hook" / "sitecustomize.py").write_text(HOOK)
    (tmp / "load.lua").write_text(LUA)
    [w] = [w for w in workloads(ROOT / "models", "astronaut", "digits", 2000) if w.label == "v1 classify, JSON"]
    (tmp / "body").write_bytes(w.body)
    load = Load(w.label, w.paths["inr"], tmp / "body", ctype=w.ctype, ihcl=w.ihcl)
    receiver = Receiver().start()
    otlp = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.grpc_url,
    }
    ways = {
        "off": {},
        "not sampled": {**otlp, "OTEL_TRACES_SAMPLER": "always_off"},
        "1 in 20": {**otlp, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.05"},
        "every span": {**otlp, "OTEL_TRACES_SAMPLER": "always_on"},
    }
    trees = {"this tree": ROOT, **({"baseline": a.baseline} if a.baseline else {})}
    rows = []
    try:
        for tree, cwd in trees.items():
            for way, env in ways.items():
                stats = tmp / f"{len(rows)}.json"
                srv = Server(
                    ROOT / "models",
                    way,
                    {"INR_THREADS": "1", "PYTHONPATH": str(tmp / "hook"), "GC_COST_OUT": str(stats), **env},
                    cwd=cwd,
                ).wait()
                try:
                    run_wrk(srv.url, load, a.clients, 1, tmp / "load.lua")  # warm-up
                    time.sleep(1.0)
                    before = json.loads(stats.read_text())
                    r = wrk(srv, load, a.clients, a.seconds, tmp / "load.lua")
                    time.sleep(1.0)
                    after = json.loads(stats.read_text())
                finally:
                    srv.stop()
                n = r["rps"] * a.seconds
                gens = {
                    g: {"collections": after[g][0] - before[g][0], "ms": round((after[g][1] - before[g][1]) * 1e3, 1)}
                    for g in after
                }
                row = {
                    "tree": tree,
                    "way": way,
                    "requests": round(n),
                    "rps": round(r["rps"]),
                    "cpu_ms_per_req": round(r["cpu_ms_per_req"], 3),
                    "generations": gens,
                    "gc_ms_per_req": round(sum(v["ms"] for v in gens.values()) / n, 4),
                }
                rows.append(row)
                print(
                    f"{tree:9s} {way:12s} {row['rps']:5d} req/s {row['cpu_ms_per_req']:.3f} CPU ms/req; "  # noqa: T201
                    f"collections (gen 0/1/2) {'/'.join(str(v['collections']) for v in gens.values())} taking "
                    f"{'/'.join(str(v['ms']) for v in gens.values())} ms: {row['gc_ms_per_req']:.3f} ms/req",
                    flush=True,
                )
    finally:
        receiver.stop()
    a.out.write_text(
        json.dumps({"machine": machine(), "seconds": a.seconds, "clients": a.clients, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
