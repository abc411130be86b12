"""Per-request cost against its floor, and the batching policies side by side (docs/benchmarks.md, floor).

For each workload (one-digit classify over v1 and V2 JSON, 2,000-coordinate queries over v1 and V2
JSON, 20,000 coordinates over V2 binary) and 1, 8 and 32 clients, wrk loads in turn:

  - the service with the adaptive batching policy (the default) and with Triton's fixed delay
    (INR_BATCH_POLICY=delay: the model's max_queue_delay_microseconds, 2 ms for digits);
  - the floor: the same uvicorn answering a constant body of the same size (bench/floor_app.py);

with `--baseline DIR`, also the service as it is in DIR (a copy of an earlier commit: `git archive
COMMIT service modelrepo | tar -x -C DIR`), as the server "before", and with `--variant NAME:K=V,...`
the service with more settings, so that a change is measured side by side with the code it replaces; and
the model alone runs in this process (onnxruntime, one thread, the same input), in every round
just before that workload's servers, so that the ratios come from one moment of a shared machine. Each server's
CPU per request (user + system, /proc) is split as model + floor + ours. All runs use one
onnxruntime thread per model, as bench.peers does; rounds interleave the servers.

    python -m bench.floor [--rounds 2] [--concurrency 1,8,32] [--duration 3] [--policies adaptive]
                          [--loads classify] [--baseline /tmp/floor-base] [--variant off:INR_INLINE_RUN_MS=0]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .peers_loads import HEADER, workloads
from .serving import LUA, ROOT, Load, Server, free_port, machine, median, run_wrk, summary, wrk

POLICIES = {"adaptive": {"INR_BATCH_POLICY": "adaptive"}, "delay": {"INR_BATCH_POLICY": "delay"}}


class FloorServer(Server):
    """uvicorn with bench/floor_app.py, as `python -m service` runs uvicorn."""

    def __init__(self, answers: Path):
        self.name, self.port = "floor", free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "bench.floor_app:app",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--no-access-log",
                "--timeout-keep-alive",
                "90",
                "--http",
                "service.server.guards:HeaderTimeoutProtocol",
            ],
            cwd=ROOT,
            env={**os.environ, "BENCH_FLOOR_ANSWERS": str(answers)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = 60) -> "FloorServer":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                httpx.get(self.url + "/", timeout=1)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the floor server did not start")


def model_cpu_ms(bare, seconds: float = 1.0) -> tuple[float, float]:
    """CPU and wall milliseconds per call of the model alone (median of 5 batches)."""
    bare()
    cpu, wall = [], []
    for _ in range(5):
        n, c0, w0 = 0, time.process_time(), time.perf_counter()
        while time.perf_counter() - w0 < seconds / 5:
            bare()
            n += 1
        cpu.append((time.process_time() - c0) * 1000 / n)
        wall.append((time.perf_counter() - w0) * 1000 / n)
    return median(cpu), median(wall)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--concurrency", type=lambda t: [int(v) for v in t.split(",")], default=[1, 8, 32])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "floor.json")
    p.add_argument("--policies", type=lambda t: t.split(","), default=list(POLICIES), help="adaptive,delay")
    p.add_argument("--loads", default="", help="only the workloads whose label contains this text")
    p.add_argument("--baseline", type=Path, help="a checkout of the service to run beside it as 'before'")
    p.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="seconds of rest after each server's run, so that its "
        "background work (a trace exporter's last batch) is not paid by the next one",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME[@DIR]:K=V,...: the service (or the checkout in DIR) with these settings",
    )
    args = p.parse_args(argv)
    info = machine()
    tmp = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    script = tmp / "load.lua"
    script.write_text(LUA)
    loads = [w for w in workloads(args.models, "astronaut", "digits", 2000) if "binary" not in w.label]
    loads += [w for w in workloads(args.models, "astronaut", "digits", 20000) if "binary" in w.label]
    loads = [w for w in loads if args.loads in w.label]
    env = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "20000"}
    ours = {name: Server(args.models, name, {**env, **POLICIES[name]}) for name in args.policies}
    if args.baseline:
        ours["before"] = Server(args.models, "before", {**env, **POLICIES["adaptive"]}, cwd=args.baseline)
    for v in args.variant:  # NAME[@DIR]:K=V,...: DIR runs another checkout with these settings
        name, _, pairs = v.partition(":")
        name, _, cwd = name.partition("@")
        ours[name] = Server(
            args.models,
            name,
            {**env, **dict(kv.split("=", 1) for kv in pairs.split(","))},
            cwd=Path(cwd) if cwd else ROOT,
        )
    servers: dict[str, Server] = dict(ours)
    rows, results = [], {}
    try:
        for s in ours.values():
            s.wait()
        answers, bodies = {}, {}
        for w in loads:  # the floor answers each path with the service's own answer, byte for byte in size
            path = w.paths["inr"]
            body = tmp / f"{len(bodies)}.body"
            body.write_bytes(w.body)
            bodies[w.label] = Load(w.label, path, body, ctype=w.ctype, ihcl=w.ihcl)
            r = httpx.post(
                next(iter(ours.values())).url + path,
                content=w.body,
                timeout=60,
                headers={"content-type": w.ctype, **({HEADER: w.ihcl} if w.ihcl else {})},
            )
            assert r.status_code == 200, r.text[:300]
            extra = {HEADER: r.headers[HEADER]} if HEADER in r.headers else {}
            answers[path] = (r.headers["content-type"], extra, base64.b64encode(r.content).decode())
        (tmp / "answers.json").write_text(json.dumps(answers))
        servers["floor"] = FloorServer(tmp / "answers.json").wait()
        model: dict[str, list[tuple[float, float]]] = {}
        for rnd in range(args.rounds):
            for w in loads:
                model.setdefault(w.label, []).append(model_cpu_ms(w.bare))  # this round, beside its servers
                for c in args.concurrency:
                    k = rnd % len(servers)
                    order = list(servers)[k:] + list(servers)[:k]
                    for name in order:
                        load, s = bodies[w.label], servers[name]
                        run_wrk(s.url, load, c, 1, script)  # warm-up
                        r = wrk(s, load, c, args.duration * (2 if "coordinates" in w.label else 1), script)
                        results.setdefault((w.label, c, name), []).append(r)
                        time.sleep(args.gap)
                        print(
                            f"{w.label} c={c} {name}: {r['rps']:.0f} req/s p50 {r['p50_ms']:.2f} ms "
                            f"{r['cpu_ms_per_req']:.3f} CPU ms/req errors {r['errors']} "
                            f"(load {os.getloadavg()[0]:.1f})",
                            flush=True,
                        )
        for (label, c, name), rs in results.items():
            rows.append(
                {
                    "load": label,
                    "clients": c,
                    "server": name,
                    **summary(rs),
                    "model_cpu_ms": median([m[0] for m in model[label]]),
                    "model_wall_ms": median([m[1] for m in model[label]]),
                    "model_cpu_ms_rounds": [round(m[0], 3) for m in model[label]],
                }
            )
    finally:
        for s in servers.values():
            s.stop()
    info["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    """Per workload and client count: the model and the floor, then each server's req/s, p50, CPU ms per
    request, "ours" (CPU − model − floor) and CPU ÷ model."""
    by = {(r["load"], r["clients"], r["server"]): r for r in rows}
    names = [n for n in dict.fromkeys(r["server"] for r in rows) if n != "floor"]
    head = "".join(f" {n} req/s | {n} p50 ms | {n} CPU ms | {n} ours | {n} ÷ model |" for n in names)
    lines = [
        f"| workload | clients | model CPU ms | floor CPU ms | floor req/s |{head}",
        "|---|---:|---:|---:|---:|" + "---:|" * 5 * len(names),
    ]
    for label, c in sorted({k[:2] for k in by}, key=lambda k: (k[0], k[1])):
        f = by[(label, c, "floor")]
        m = f["model_cpu_ms"]
        cells = "".join(
            f" {a['rps']:.0f} | {a['p50_ms']:.2f} | {a['cpu_ms_per_req']:.3f} | "
            f"{a['cpu_ms_per_req'] - m - f['cpu_ms_per_req']:.3f} | {a['cpu_ms_per_req'] / m:.2f}× |"
            for a in (by[(label, c, n)] for n in names)
        )
        lines.append(f"| {label} | {c} | {m:.3f} | {f['cpu_ms_per_req']:.3f} | {f['rps']:.0f} |{cells}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
