"""This service against KServe's Python ModelServer, LitServe and BentoML, on the same ONNX files
(docs/benchmarks.md, peers).

Every server runs on a free 127.0.0.1 port at once, with one onnxruntime intra-op thread per model. Each
answer is checked against onnxruntime first; then wrk loads them in turn (the order rotates every round),
at each concurrency, and the table keeps the median round: req/s, p50, p99 and the server's CPU
milliseconds per request (its processes' /proc times).

    python -m bench.peers --peer-python /work/venv-peers/bin/python
    python -m bench.peers --servers inr,inr2,kserve,litserve,bentoml   # also ours with 2 uvicorn workers
    python -m bench.peers --servers inr --rounds 1 --duration 1 --concurrency 1   # our server alone
    python -m bench.peers --servers inr --baseline /tmp/before   # ours beside another checkout of it (`base`)

The peers live in their own virtual environment (`pip install '.[peers]'` there; they pin FastAPI and
pydantic versions of their own), started with --peer-python. Needs `wrk` (apt-get install -y wrk).
Results: bench/results/peers.json and a markdown table in the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .peers_loads import Workload, check, workloads
from .serving import LUA, Load, Server, free_port, machine, median, run_wrk, summary, wrk

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench.peers")
PEERS = ("kserve", "litserve", "bentoml")
TITLES = {
    "inr": "here",
    "inr2": "here, 2 workers",
    "base": "here, --baseline",
    "kserve": "KServe",
    "litserve": "LitServe",
    "bentoml": "BentoML",
}
PACKAGES = {"kserve": "kserve", "litserve": "litserve", "bentoml": "bentoml"}


class PeerServer(Server):
    """One server process (and its children) in a session of its own, stopped as a group."""

    def __init__(self, name: str, cmd: list[str], ready: str, env: dict, log_path: Path, cwd: Path = ROOT):
        self.name, self.port, self.ready, self.log_path = name, free_port(), ready, log_path
        self.url = f"http://127.0.0.1:{self.port}"
        grpc = str(free_port())  # ours: each its own gRPC port, so that two of ours can run at once
        self.cmd = [a.replace("{port}", str(self.port)).replace("{grpc_port}", grpc) for a in cmd]
        with open(
            log_path, "wb"
        ) as out:  # `python -m` imports from its working directory first: ROOT's, or --baseline's
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=cwd,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, timeout: float = 180) -> "PeerServer":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}: {tail[0]}")
            try:
                if httpx.get(self.url + self.ready, timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} was not ready on {self.ready} after {timeout:g} s")

    def stop(self) -> None:
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue


def commands(args) -> dict[str, tuple[list[str], str]]:
    """Each server's command line ({port} filled in later) and its readiness path."""
    peer = [args.peer_python]
    ours = [
        sys.executable,
        "-m",
        "service",
        "--models",
        str(args.models),
        "--port",
        "{port}",
        "--grpc-port",
        "{grpc_port}",
        "--threads",
        str(args.threads),
        "--log-level",
        "error",
    ]
    return {
        "inr": (ours, "/health/ready"),
        "inr2": (ours + ["--workers", "2"], "/health/ready"),
        "base": (ours, "/health/ready"),  # run in --baseline's folder
        "kserve": (peer + ["-m", "bench.peers_kserve", "--port", "{port}"], "/v2/health/ready"),
        "litserve": (peer + ["-m", "bench.peers_litserve", "--port", "{port}"], "/health"),
        "bentoml": (
            peer + ["-m", "bentoml", "serve", "bench.peers_bentoml:Peer", "--host", "127.0.0.1", "--port", "{port}"],
            "/readyz",
        ),
    }


def peer_versions(python: str, names: list[str]) -> dict[str, str]:
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    pkgs = [PACKAGES[n] for n in names if n in PACKAGES] + ["onnxruntime"]
    out = subprocess.run([python, "-c", code, *pkgs], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(
            f"--peer-python {python} lacks {', '.join(pkgs)}: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return json.loads(out.stdout)


def simd_flags() -> list[str]:
    """The AVX flags lscpu reports (onnxruntime's kernels depend on them)."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    flags = next((row.split(":", 1)[1].split() for row in out.splitlines() if row.startswith("Flags:")), [])
    return sorted(f for f in flags if f.startswith("avx"))


def idle_cpu(servers: dict[str, PeerServer], seconds: float = 3.0) -> dict[str, float]:
    """CPU share (%) each server burns with no requests: a polling server would tax its neighbours."""
    before = {n: s.cpu_seconds() for n, s in servers.items()}
    time.sleep(seconds)
    return {n: round((s.cpu_seconds() - before[n]) * 100 / seconds, 1) for n, s in servers.items()}


def model_cpu_ms(load: Workload, seconds: float = 0.5) -> float:
    """CPU milliseconds of one onnxruntime run on the workload's input, here (1 thread): the floor."""
    load.bare()
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        load.bare()
        n += 1
    return (time.process_time() - t0) * 1000 / n


def settle(server: PeerServer, timeout: float = 30.0) -> None:
    """Wait until the server has finished what wrk left in flight (its CPU use falls under 5 % of a core),
    so that no backlog spills into the next run, its own or another server's."""
    end, cpu = time.monotonic() + timeout, server.cpu_seconds()
    while time.monotonic() < end:
        time.sleep(0.25)
        cpu, before = server.cpu_seconds(), cpu
        if cpu - before < 0.0125:
            return


def measure(servers: dict[str, PeerServer], loads: list[Workload], args, script: Path, save) -> list[dict]:
    """`rounds` rounds; in each, every workload and concurrency on every server, the order rotating.
    After each round `save(rows)` gets the medians so far."""
    results: dict[tuple, list] = {}
    for rnd in range(args.rounds):
        for load in loads:
            results.setdefault((load.label, "model"), []).append(model_cpu_ms(load))
            names = [n for n in load.paths if n in servers]
            seconds = args.coords_duration if load.coordinates else args.duration
            for i, c in enumerate(args.concurrency):
                k = (rnd + i) % len(names)
                for name in names[k:] + names[:k]:
                    s = servers[name]
                    w = Load(
                        load.label, load.paths[name], args.tmp / f"{id(load)}.body", ctype=load.ctype, ihcl=load.ihcl
                    )
                    if args.warmup:
                        run_wrk(s.url, w, c, args.warmup, script)
                        settle(s)
                    r = wrk(s, w, c, seconds, script)
                    settle(s)
                    r["load_avg"] = os.getloadavg()[0]
                    log.info(
                        "round %d %s c=%d %s: %.0f req/s p50 %.1f ms p99 %.1f ms, %.2f CPU ms/req, errors %d "
                        "(load %.1f)",
                        rnd + 1,
                        load.label,
                        c,
                        name,
                        r["rps"],
                        r["p50_ms"],
                        r["p99_ms"],
                        r["cpu_ms_per_req"],
                        r["errors"],
                        r["load_avg"],
                    )
                    results.setdefault((load.label, c, name), []).append(r)
        save(rows_from(results, servers, loads, args.concurrency))
    return rows_from(results, servers, loads, args.concurrency)


def rows_from(results: dict[tuple, list], servers, loads: list[Workload], concurrency: list[int]) -> list[dict]:
    rows = []
    for load in loads:
        for c in concurrency:
            peers = [n for n in load.paths if n in servers and n in PEERS]
            for name in [n for n in load.paths if n in servers]:
                rs = results[(load.label, c, name)]
                row = {
                    "load": load.label,
                    "concurrency": c,
                    "server": name,
                    **summary(rs),
                    "cores": median([r["rps"] * r["cpu_ms_per_req"] / 1000 for r in rs]),
                    "model_cpu_ms": median(results[(load.label, "model")]),
                    "max_abs_diff": load.checks[name],
                }
                if name == "inr" and peers:  # per round: ours over the best peer of that round
                    best = [max(results[(load.label, c, p)][r]["rps"] for p in peers) for r in range(len(rs))]
                    ratios = [a["rps"] / b if b > 0 else float("inf") for a, b in zip(rs, best)]
                    row["ratio_rounds"] = [round(x, 2) for x in ratios]
                    row["ratio_best_peer"] = median(ratios)
                    row["target"] = 2.0 if load.coordinates else 1.0
                rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| workload | clients | server | req/s | p50 ms | p99 ms | CPU ms/req | cores busy | here ÷ best peer |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['ratio_best_peer']:.2f}× (target {r['target']:g}×)" if "ratio_best_peer" in r else ""
        errors = f" ({r['errors']} errors)" if r["errors"] else ""
        lines.append(
            f"| {r['load']} | {r['concurrency']} | {TITLES[r['server']]} | {r['rps']:.0f}{errors} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_ms_per_req']:.2f} | {r['cores']:.2f} | {ratio} |"
        )
    return "\n".join(lines)


def side_by_side(rows: list[dict]) -> str:
    """One line per workload and concurrency: every server's req/s (CPU ms/req), ours over the best peer."""
    names = [n for n in TITLES if any(r["server"] == n for r in rows)]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["load"], r["concurrency"]), {})[r["server"]] = r
    lines = [
        "| workload | clients | " + " | ".join(TITLES[n] for n in names) + " | here ÷ best peer | target "
        "| CPU: best peer ÷ here | model alone, CPU ms |",
        "|---|---:|" + "---:|" * len(names) + "---:|---:|---:|---:|",
    ]
    for (load, c), by in cells.items():
        vals = [f"{by[n]['rps']:.0f} ({by[n]['cpu_ms_per_req']:.1f})" if n in by else "–" for n in names]
        ours = by["inr"]
        ratio = f"{ours['ratio_best_peer']:.2f}×" if "ratio_best_peer" in ours else "–"
        target = f"≥ {ours['target']:g}×" if "target" in ours else "–"
        peer_cpu = [r["cpu_ms_per_req"] for n, r in by.items() if n in PEERS]
        cpu = f"{min(peer_cpu) / ours['cpu_ms_per_req']:.2f}×" if peer_cpu else "–"
        lines.append(
            f"| {load} | {c} | " + " | ".join(vals) + f" | {ratio} | {target} | {cpu} | {ours['model_cpu_ms']:.2f} |"
        )
    return "\n".join(lines)


def run(args) -> dict:
    names = args.servers
    info = {
        **machine(),
        "simd": simd_flags(),
        "command": "python -m bench.peers " + " ".join(args.argv),
        "load_avg_before": list(os.getloadavg()),
        "onnxruntime_threads": args.threads,
    }
    peers = [n for n in names if n in PEERS]
    if peers:
        info["peer_versions"] = peer_versions(args.peer_python, peers)
    found = workloads(args.models, args.image, args.digits, args.coords)
    loads = [w for w in found if "inr" in names and any(n in names for n in w.paths)]
    env = {
        "INR_PEER_MODELS": str(args.models.resolve()),
        "INR_PEER_THREADS": str(args.threads),
        "OMP_NUM_THREADS": "1",
        "BENTOML_DO_NOT_TRACK": "True",
        "PYTHONUNBUFFERED": "1",
    }
    cmds, servers = commands(args), {}
    try:
        for n in names:
            cmd, ready = cmds[n]
            cwd = args.baseline if n == "base" else ROOT
            servers[n] = PeerServer(n, cmd, ready, env, args.tmp / f"{n}.log", cwd=cwd)
        for s in servers.values():
            s.wait()
        for load in loads:
            (args.tmp / f"{id(load)}.body").write_bytes(load.body)
            for n in load.paths:
                if n in servers:
                    diff = check(load, n, servers[n].url, args.atol)
                    log.info("%s on %s: matches onnxruntime, max abs diff %.2g", load.label, n, diff)
        info["idle_cpu_percent"] = idle_cpu(servers)
        rows = measure(
            servers,
            loads,
            args,
            args.tmp / "bench.lua",
            lambda partial: write(args.out, {"machine": info, "rows": partial, "partial": True}),
        )
    finally:
        for s in servers.values():
            s.stop()
    info["load_avg_after"] = list(os.getloadavg())
    return {"machine": info, "rows": rows}


def write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--image", default="astronaut", help="coords → rgb model in --models")
    p.add_argument("--digits", default="digits", help="digit classifier in --models")
    p.add_argument(
        "--servers",
        type=lambda t: t.split(","),
        default=["inr", *PEERS],
        help="inr (this service), inr2 (the same with 2 uvicorn workers), kserve, litserve, bentoml",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of this project (e.g. `git worktree add DIR REV`), served beside the others as "
        "`base`, with the same models",
    )
    p.add_argument("--peer-python", default=sys.executable, help="the interpreter that has the peers installed")
    p.add_argument("--concurrency", type=lambda t: [int(v) for v in t.split(",")], default=[1, 8, 32])
    p.add_argument("--duration", type=int, default=3, help="seconds per wrk run (wrk takes whole seconds)")
    p.add_argument(
        "--coords-duration",
        type=int,
        default=6,
        help="seconds per wrk run of the coordinate workloads (32 of them in flight take seconds)",
    )
    p.add_argument("--warmup", type=int, default=1, help="seconds of wrk before each timed run (0: none)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; the table keeps medians")
    p.add_argument("--coords", type=int, default=2000, help="coordinates per query")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads of every server")
    p.add_argument("--atol", type=float, default=1e-5, help="largest difference from onnxruntime accepted")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peers.json")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    choices = [n for n in TITLES if n != "base"]  # `base` comes with --baseline
    unknown = [n for n in args.servers if n not in choices]
    problem = (
        f"unknown server(s) {unknown}; choose from {', '.join(choices)}"
        if unknown
        else "--servers must include inr (every ratio is against this service)"
        if "inr" not in args.servers
        else f"--baseline {args.baseline} is not a checkout of this project (no service/__main__.py)"
        if args.baseline and not (args.baseline / "service" / "__main__.py").is_file()
        else f"--peer-python {args.peer_python} is not a program"
        if shutil.which(args.peer_python) is None
        else f"--models {args.models} has no {args.image}/1/model.onnx or {args.digits}/1/model.onnx"
        if not all((args.models / m / "1" / "model.onnx").is_file() for m in (args.image, args.digits))
        else "--rounds, --duration and --coords must be positive"
        if min(args.rounds, args.duration, args.coords_duration, args.coords, *args.concurrency) <= 0 or args.warmup < 0
        else "wrk is not installed (Debian: apt-get install -y wrk)"
        if shutil.which("wrk") is None
        else None
    )
    if problem:
        sys.stderr.write(f"error: {problem}\n")
        return 2
    if args.baseline:
        args.servers = [*args.servers, "base"]
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = Path(tmp)
        (args.tmp / "bench.lua").write_text(LUA)
        try:
            result = run(args)
        except (RuntimeError, ValueError) as e:
            sys.stderr.write(f"error: {e}\n")
            return 2
    write(args.out, result)
    log.info("\n%s\n\n%s\n\nwritten to %s", side_by_side(result["rows"]), table(result["rows"]), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
