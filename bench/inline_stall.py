"""What a lone run on the event loop costs the other requests (docs/benchmarks.md, inline_stall).

A request that is the only one in flight runs on the event loop when its run is short (INR_INLINE_RUN_MS),
which saves the hand-off to a pool thread; while it runs, the loop answers nothing else. Here one wrk client
sends 2,000-coordinate v1 queries back to back (each a lone request whenever no probe is in flight) while this
process sends probes at a steady rate on their own connection: `GET /health/ready` (what a load balancer or
kubelet asks) and a one-digit v1 classify (another model). For each INR_INLINE_RUN_MS, side by side in rounds:
the queries' req/s and server CPU per query, and the probes' latency (p50, p99, max).

    python -m bench.inline_stall [--settings 0,2,10] [--rounds 3] [--duration 4] [--rate 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from .peers_loads import workloads
from .serving import LUA, ROOT, Load, Server, machine, median, wrk

PROBES = ("GET /health/ready", "POST classify")


def probe(url: str, digit: bytes, rate: float, stop: threading.Event) -> dict[str, list[float]]:
    """Probes at `rate` per second, alternating the two kinds; each one's latency in ms."""
    got: dict[str, list[float]] = {k: [] for k in PROBES}
    with httpx.Client(base_url=url, timeout=10) as c:
        i = 0
        while not stop.is_set():
            kind = PROBES[i % 2]
            t0 = time.perf_counter()
            if kind.startswith("GET"):
                r = c.get("/health/ready")
            else:
                r = c.post("/v1/models/digits/classify", content=digit, headers={"content-type": "application/json"})
            got[kind].append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            i += 1
            time.sleep(max(0.0, 1 / rate - (time.perf_counter() - t0)))
    return got


def pct(v: list[float], q: float) -> float:
    return float(np.percentile(v, q)) if v else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inline_stall", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--settings", default="0,2,10", help="INR_INLINE_RUN_MS values to compare")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=4)
    p.add_argument("--rate", type=float, default=50, help="probes per second")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-stall-"))
    (tmp / "load.lua").write_text(LUA)
    w = {x.label: x for x in workloads(args.models, "astronaut", "digits", 2000)}
    query, digit = w["v1 query, 2,000 coordinates"], w["v1 classify, JSON"]
    (tmp / "query").write_bytes(query.body)
    load = Load(query.label, query.paths["inr"], tmp / "query", "POST", "application/json")
    servers = {
        ms: Server(args.models, f"inline {ms} ms", {"INR_THREADS": "1", "INR_INLINE_RUN_MS": ms})
        for ms in args.settings.split(",")
    }
    results: dict[str, list[dict]] = {k: [] for k in servers}
    try:
        for s in servers.values():
            s.wait()
        for r in range(args.rounds):
            for ms in list(servers)[r % len(servers) :] + list(servers)[: r % len(servers)]:
                s, stop, got = servers[ms], threading.Event(), {}
                t = threading.Thread(target=lambda: got.update(probe(s.url, digit.body, args.rate, stop)))
                t.start()
                q = wrk(s, load, 1, args.duration, tmp / "load.lua")
                stop.set()
                t.join()
                results[ms].append(
                    {
                        "rps": q["rps"],
                        "cpu_ms": q["cpu_ms_per_req"],
                        "errors": q["errors"],
                        **{f"{k} {n}": pct(v, n) for k, v in got.items() for n in (50, 99, 100)},
                    }
                )
                print(f"round {r + 1} INR_INLINE_RUN_MS={ms}: {json.dumps(results[ms][-1])}", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    print(f"\n{machine()}\n")
    cols = ["rps", "cpu_ms", *[f"{k} {n}" for k in PROBES for n in (50, 99, 100)]]
    print(
        "| INR_INLINE_RUN_MS | query req/s | query CPU ms | "
        + " | ".join(f"{k} {'max' if n == 100 else f'p{n}'} ms" for k in PROBES for n in (50, 99, 100))
        + " |"
    )
    print("|---:" * (len(cols) + 1) + "|")
    for ms, rounds in results.items():
        print(f"| {ms} | " + " | ".join(f"{median([x[c] for x in rounds]):.2f}" for c in cols) + " |")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "args": vars(args) | {"models": str(args.models), "out": str(args.out)},
                    "results": results,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
