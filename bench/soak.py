"""Soak (docs/benchmarks.md, soak) — 64 keep-alive connections of mixed load for 60 s against one server.

The load is four wrk processes at once, each one kind of request on its own connections:

* classify: one 28×28 digit as v1 JSON;
* query: 2,000 coordinates as v1 JSON;
* render: GET a 96² PNG;
* viewer: the same render from connections that pause 1–6 s between requests (wrk's `delay`),
  as a person panning a viewer does; their connections sit idle for about uvicorn's default
  keep-alive of 5 s, which is where a server closing idle connections meets a client reusing them.

It reports, per request type, requests, p50/p99 latency and wrk's errors by kind (connect, read,
write, timeout, non-2xx status), and the server's RSS after the warm-up and at the end.

    python -m bench.soak                          # 64 connections, 10 s warm-up, 60 s
    python -m bench.soak --keep-alive 5 5,90      # before/after: uvicorn's 5 s against the default
    python -m bench.soak --preset ci              # a few seconds, for the test suite

Needs `wrk` (Debian: apt-get install -y wrk). Results: bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .common import RESULTS, write_json
from .procs import status_kib
from .serving import ROOT, Server, find_models, machine

log = logging.getLogger("bench.soak")
LUA = """
local f = io.open(os.getenv("SOAK_BODY"), "rb")
wrk.method = os.getenv("SOAK_METHOD")
if wrk.method == "POST" then
  wrk.body = f:read("*a")
  wrk.headers["Content-Type"] = "application/json"
end
f:close()
local lo, hi = tonumber(os.getenv("SOAK_THINK_LO")), tonumber(os.getenv("SOAK_THINK_HI"))
if hi > 0 then
  delay = function() return math.random(lo, hi) end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %d, "duration_s": %.3f, "p50_ms": %.3f, "p99_ms": %.3f, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect, e.read, e.write, e.timeout, e.status))
end
"""
PRESETS = {
    "full": {"duration": 60.0, "warmup": 10.0, "connections": {"classify": 16, "query": 24, "render": 16, "viewer": 8}},
    "ci": {"duration": 4.0, "warmup": 1.0, "connections": {"classify": 2, "query": 2, "render": 2, "viewer": 2}},
}
THINK_MS = (1000, 6000)


def bodies(models: dict[str, str], tmp: Path) -> dict[str, tuple[str, str, Path]]:
    """Per request type: method, path, body file."""
    rng = np.random.default_rng(0)
    classify, query, empty = tmp / "classify.json", tmp / "query.json", tmp / "empty"
    classify.write_text(json.dumps({"images": [rng.random((28, 28)).round(3).tolist()]}))
    query.write_text(json.dumps({"coords": rng.random((2000, 2)).round(6).tolist()}))
    empty.write_bytes(b"")
    image, digits = models["image"], models["digits"]
    render = ("GET", f"/v1/models/{image}/render?width=96&height=96&format=png", empty)
    return {
        "classify": ("POST", f"/v1/models/{digits}/classify", classify),
        "query": ("POST", f"/v1/models/{image}/query", query),
        "render": render,
        "viewer": render,
    }


def run_wrk(url: str, kind: str, method: str, body: Path, connections: int, seconds: float, script: Path) -> dict:
    think = THINK_MS if kind == "viewer" else (0, 0)
    env = {
        **os.environ,
        "SOAK_BODY": str(body),
        "SOAK_METHOD": method,
        "SOAK_THINK_LO": str(think[0]),
        "SOAK_THINK_HI": str(think[1]),
    }
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        env=env,
    ).stdout
    line = next(row for row in out.splitlines() if row.startswith("RESULT "))
    r = json.loads(line[len("RESULT ") :])
    r["rps"] = r["requests"] / r["duration_s"]
    return r


def mixed(server: Server, load: dict, connections: dict[str, int], seconds: float, script: Path) -> dict:
    """All request types at once, each from its own wrk process."""
    with ThreadPoolExecutor(len(connections)) as pool:
        futures = {
            kind: pool.submit(
                run_wrk, server.url + load[kind][1], kind, load[kind][0], load[kind][2], n, seconds, script
            )
            for kind, n in connections.items()
        }
        return {kind: f.result() for kind, f in futures.items()}


def rss_mib(pid: int) -> float:
    return status_kib(pid, "VmRSS") / 1024


def soak(repo: Path, models: dict, keep_alive: float | None, preset: dict, script: Path, tmp: Path) -> dict:
    env = {"INR_THREADS": "1"} | ({"INR_TIMEOUT_KEEP_ALIVE": f"{keep_alive:g}"} if keep_alive else {})
    server = Server(repo, f"keep-alive {keep_alive or 'default'}", env).wait()
    try:
        load = bodies(models, tmp)
        mixed(server, load, preset["connections"], preset["warmup"], script)
        rss_warm = rss_mib(server.proc.pid)
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        kinds = mixed(server, load, preset["connections"], preset["duration"], script)
        wall = time.monotonic() - t0
        rss_end = rss_mib(server.proc.pid)
        cpu = server.cpu_seconds() - cpu0
    finally:
        server.stop()
    errors = {k: sum(r["errors"][k] for r in kinds.values()) for k in ("connect", "read", "write", "timeout", "status")}
    return {
        "keep_alive_s": keep_alive,
        "connections": sum(preset["connections"].values()),
        "duration_s": preset["duration"],
        "warmup_s": preset["warmup"],
        "kinds": kinds,
        "errors": errors,
        "errors_total": sum(errors.values()),
        "rss_warm_mib": rss_warm,
        "rss_end_mib": rss_end,
        "rss_growth": rss_end / rss_warm - 1,
        "server_cpu_share": cpu / wall,
    }


def table(runs: list[dict]) -> str:
    lines = [
        "| keep-alive | type | conns | requests | req/s | p50 ms | p99 ms "
        "| errors (connect/read/write/timeout/status) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        ka = f"{run['keep_alive_s']:g} s" if run["keep_alive_s"] else "default"
        for kind, r in run["kinds"].items():
            e = r["errors"]
            lines.append(
                f"| {ka} | {kind} | {run['conns'][kind]} | {r['requests']} | {r['rps']:.1f} | "
                f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{e['connect']}/{e['read']}/{e['write']}/{e['timeout']}/{e['status']} |"
            )
        lines.append(
            f"| {ka} | **all** | {run['connections']} | | | | | **{run['errors_total']}**; RSS "
            f"{run['rss_warm_mib']:.0f} → {run['rss_end_mib']:.0f} MiB ({run['rss_growth']:+.1%}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    p.add_argument(
        "--models", type=Path, default=ROOT / "models", help="model repository (an image and a digits model)"
    )
    p.add_argument("--preset", choices=PRESETS, default="full")
    p.add_argument("--duration", type=float, help="seconds of the measured run (preset: 60, ci: 4)")
    p.add_argument(
        "--keep-alive",
        default="",
        help="comma-separated INR_TIMEOUT_KEEP_ALIVE values to run in turn (default: the service's default)",
    )
    p.add_argument("--out", default="soak", help="result name under bench/results (or --out-dir)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if shutil.which("wrk") is None:
        sys.stderr.write("error: wrk is not installed (Debian: apt-get install -y wrk)\n")
        return 2
    models = find_models(args.models)
    if not {"image", "digits"} <= models.keys():
        sys.stderr.write(f"error: --models {args.models} needs an image and a digits model\n")
        return 2
    preset = dict(PRESETS[args.preset])
    if args.duration:
        preset["duration"] = args.duration
    keep_alives = [float(v) for v in args.keep_alive.split(",") if v] or [None]
    info = machine()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "soak.lua"
        script.write_text(LUA)
        for ka in keep_alives:
            log.info(
                "soak: keep-alive %s, %s connections, %g s", ka or "default", preset["connections"], preset["duration"]
            )
            run = soak(args.models, models, ka, preset, script, Path(tmp))
            run["conns"] = preset["connections"]
            runs.append(run)
    info["load_after"] = os.getloadavg()[0]
    result = {
        "machine": info,
        "command": "python -m bench.soak " + " ".join(argv or sys.argv[1:]),
        "models": models,
        "think_ms": THINK_MS,
        "runs": runs,
    }
    write_json(args.out, result, args.out_dir)
    log.info("\n%s", table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
