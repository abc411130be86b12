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
    python -m bench.peers --servers inr --baseline /tmp/a --baseline /tmp/b --large-only   # the large cells alone

The large request (--large-coords, 20,000 coordinates by default, as v1 JSON and V2 binary) runs with the threads
each server would use by default: ours without --threads (a thread per CPU it may use), the peers with
onnxruntime's default (a thread per core), every server started again for it. Each round also times bare
onnxruntime on the same ONNX with its default threads (runs/s, one after another, in this process): the
one-client cell's goal is a share of it.

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
import sys
import tempfile
import time
from pathlib import Path

from .peers_loads import Workload, check, large_workloads, workloads
from .peers_report import PEERS, TITLES, rows_from, side_by_side, table
from .peers_servers import PeerServer, idle_cpu, peer_versions, settle, simd_flags
from .serving import LUA, Load, machine, run_wrk, wrk

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench.peers")


def commands(args, threads: int) -> dict[str, tuple[list[str], str]]:
    """Each server's command line ({port} filled in later) and its readiness path; ours with `threads`
    onnxruntime threads (0: its default)."""
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
        *(["--threads", str(threads)] if threads else []),
        "--log-level",
        "error",
    ]
    return {
        "inr": (ours, "/health/ready"),
        "inr2": (ours + ["--workers", "2"], "/health/ready"),
        **{name: (ours, "/health/ready") for name in args.baselines},  # each run in its --baseline's folder
        "kserve": (peer + ["-m", "bench.peers_kserve", "--port", "{port}"], "/v2/health/ready"),
        "litserve": (peer + ["-m", "bench.peers_litserve", "--port", "{port}"], "/health"),
        "bentoml": (
            peer + ["-m", "bentoml", "serve", "bench.peers_bentoml:Peer", "--host", "127.0.0.1", "--port", "{port}"],
            "/readyz",
        ),
    }


def repeated(load: Workload, clock, seconds: float) -> tuple[int, float]:
    """Bare onnxruntime on the workload's input, one run after another for `seconds` of `clock`: (runs, seconds)."""
    load.bare()
    n, t0 = 0, clock()
    while clock() - t0 < seconds:
        load.bare()
        n += 1
    return n, clock() - t0


def bare_rps(load: Workload) -> float:
    """Runs a second of bare onnxruntime on a large workload's input, one after another (default threads)."""
    n, seconds = repeated(load, time.perf_counter, 1.0)
    return n / seconds


def model_cpu_ms(load: Workload) -> float:
    """CPU milliseconds of one onnxruntime run on the workload's input, here (1 thread): the floor."""
    n, seconds = repeated(load, time.process_time, 0.5)
    return seconds * 1000 / n


def concurrency(args):
    return lambda load: args.large_concurrency if load.large else args.concurrency


def measure(servers: dict[str, PeerServer], loads: list[Workload], args, script: Path, results: dict, save) -> None:
    """`rounds` rounds; in each, every workload and concurrency on every server, the order rotating, into
    `results`. After each round `save()`."""
    for rnd in range(args.rounds):
        for load in loads:
            results.setdefault((load.label, "model"), []).append(model_cpu_ms(load))
            if load.large:
                results.setdefault((load.label, "bare"), []).append(bare_rps(load))
            names = [n for n in load.paths if n in servers]
            seconds = args.coords_duration if load.coordinates else args.duration
            for i, c in enumerate(concurrency(args)(load)):
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
        save()


def run(args) -> dict:
    names = args.servers
    info = {
        **machine(),
        "simd": simd_flags(),
        "command": "python -m bench.peers " + " ".join(args.argv),
        "load_avg_before": list(os.getloadavg()),
        "onnxruntime_threads": args.threads,
        "baselines": {name: str(path) for name, path in args.baselines.items()},
    }
    peers = [n for n in names if n in PEERS]
    if peers:
        info["peer_versions"] = peer_versions(args.peer_python, peers)
    found = [] if args.large_only else workloads(args.models, args.image, args.digits, args.coords)
    if args.large_coords:
        found += large_workloads(args.models, args.image, args.large_coords)
    for w in found:  # every baseline takes our paths
        w.paths.update({name: w.paths["base"] for name in args.baselines})
    loads = [w for w in found if any(n in names for n in w.paths)]
    results: dict[tuple, list] = {}
    ran: set[str] = set()

    def rows() -> list[dict]:
        return rows_from(results, ran, [w for w in loads if (w.label, "model") in results], concurrency(args))

    # the usual cells with --threads, then the large requests with each server's default threads
    for threads, group in ((args.threads, [w for w in loads if not w.large]), (0, [w for w in loads if w.large])):
        if group:
            here = [n for n in names if any(n in w.paths for w in group)]
            suffix = "" if threads else "_default_threads"

            def save() -> None:
                ran.update(here)
                write(args.out, {"machine": info, "rows": rows(), "partial": True})

            idle, peaks = serve(args, threads, here, group, results, save)
            info["idle_cpu_percent" + suffix], info["peak_rss_mib" + suffix] = idle, peaks
    info["load_avg_after"] = list(os.getloadavg())
    return {"machine": info, "rows": rows()}


def serve(args, threads: int, names: list[str], loads: list[Workload], results: dict, save) -> tuple[dict, dict]:
    """Start `names` with `threads` onnxruntime threads (0: each server's default), check every answer, measure
    `loads` into `results` (`save()` after each round), stop them; the servers' idle CPU share (%) and their peak
    resident sets (MiB, processes added up)."""
    env = {
        "INR_PEER_MODELS": str(args.models.resolve()),
        "INR_PEER_THREADS": str(threads),
        "OMP_NUM_THREADS": str(threads or os.cpu_count() or 1),
        "BENTOML_DO_NOT_TRACK": "True",
        "PYTHONUNBUFFERED": "1",
    }
    cmds, servers = commands(args, threads), {}
    try:
        for n in names:
            cmd, ready = cmds[n]
            servers[n] = PeerServer(
                n, cmd, ready, env, args.tmp / f"{n}-{threads}.log", cwd=args.baselines.get(n, ROOT)
            )
        for s in servers.values():
            s.wait()
        for load in loads:
            (args.tmp / f"{id(load)}.body").write_bytes(load.body)
            for n in load.paths:
                if n in servers:
                    diff = check(load, n, servers[n].url, args.atol)
                    log.info("%s on %s: matches onnxruntime, max abs diff %.2g", load.label, n, diff)
        idle = idle_cpu(servers)
        measure(servers, loads, args, args.tmp / "bench.lua", results, save)
        peaks = {n: s.peak_rss_mib() for n, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()
    return idle, peaks


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
        action="append",
        default=[],
        help="another checkout of this project (e.g. `git worktree add DIR REV`), served beside the others as "
        "`base` (the second as `base2`, …), with the same models; may be repeated",
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
    p.add_argument(
        "--large-coords",
        type=int,
        default=20_000,
        help="coordinates of the large request, run with each server's default threads (0: none)",
    )
    p.add_argument(
        "--large-concurrency", type=lambda t: [int(v) for v in t.split(",")], default=[1, 8], help="its clients"
    )
    p.add_argument("--large-only", action="store_true", help="only the large request's cells")
    p.add_argument("--atol", type=float, default=1e-5, help="largest difference from onnxruntime accepted")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peers.json")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    choices = list(TITLES)  # `base` comes with --baseline
    checkouts = [b for b in args.baseline if not (b / "service" / "__main__.py").is_file()]
    unknown = [n for n in args.servers if n not in choices]
    problem = (
        f"unknown server(s) {unknown}; choose from {', '.join(choices)}"
        if unknown
        else "--servers must include inr (every ratio is against this service)"
        if "inr" not in args.servers
        else f"--baseline {checkouts[0]} is not a checkout of this project (no service/__main__.py)"
        if checkouts
        else "--large-only needs --large-coords above 0"
        if args.large_only and not args.large_coords
        else f"--peer-python {args.peer_python} is not a program"
        if shutil.which(args.peer_python) is None
        else f"--models {args.models} has no {args.image}/1/model.onnx or {args.digits}/1/model.onnx"
        if not all((args.models / m / "1" / "model.onnx").is_file() for m in (args.image, args.digits))
        else "--rounds, --duration, --coords and the concurrencies must be positive, --large-coords not negative"
        if min(
            args.rounds, args.duration, args.coords_duration, args.coords, *args.concurrency, *args.large_concurrency
        )
        <= 0
        or args.warmup < 0
        or args.large_coords < 0
        else "wrk is not installed (Debian: apt-get install -y wrk)"
        if shutil.which("wrk") is None
        else None
    )
    if problem:
        sys.stderr.write(f"error: {problem}\n")
        return 2
    args.baselines = {("base" if i == 0 else f"base{i + 1}"): b.resolve() for i, b in enumerate(args.baseline)}
    args.servers = [*args.servers, *args.baselines]
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = Path(tmp)
        (args.tmp / "bench.lua").write_text(LUA)
        try:
            result = run(args)
        except (RuntimeError, ValueError) as e:
            sys.stderr.write(f"error: {e}\n")
            return 2
    write(args.out, result)
    names = {name: path.name for name, path in args.baselines.items()}
    log.info("\n%s\n\n%s\n\nwritten to %s", side_by_side(result["rows"], names), table(result["rows"], names), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
