"""This service against its peers, its earlier commits and itself with batching off (docs/benchmarks.md, peers,
serving): servers side by side, answers checked against onnxruntime, wrk loading them in turn, the order rotating
every round; a row keeps the medians of req/s, p50, p99 and the server's CPU ms a request (/proc). Needs wrk.

    python -m bench.peers peers --peer-python /work/venv-peers/bin/python   # KServe, LitServe, BentoML beside ours
    python -m bench.peers peers-large --servers inr --baseline /tmp/a   # the large request alone, beside a checkout
    python -m bench.peers serving --duration 2 --rounds 1 --concurrency 1,32   # batching on and off, then renders
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families as families

from commandline import OneLineParser, positive_int

from . import serving
from .common import RESULTS, ROOT, free_port, lscpu, median, ort_session, setup_logging, write_json
from .serving import LUA, Load, Server, Workload, check, find_models, machine, run_wrk, summary, workloads, wrk

log = logging.getLogger("bench.peers")
PEERS = ("kserve", "litserve", "bentoml")  # bench/peer_apps.py, in the venv of --peer-python
TITLES = {"inr": "here", "inr2": "here, 2 workers", "kserve": "KServe", "litserve": "LitServe", "bentoml": "BentoML"}
READY = {"kserve": "/v2/health/ready", "litserve": "/health", "bentoml": "/readyz"}  # ours: /health/ready


class PeerServer(Server):
    """A command ({port}, {grpc_port} filled in) in a session of its own, stopped as a group, run in `cwd`."""

    def __init__(self, name: str, cmd: list[str], ready: str, env: dict, log_path: Path, cwd: Path = ROOT):
        self.name, self.port, self.ready, self.log_path = name, free_port(), ready, log_path
        self.url, grpc = f"http://127.0.0.1:{self.port}", str(free_port())  # two of ours may run at once
        cmd = [a.replace("{port}", str(self.port)).replace("{grpc_port}", grpc) for a in cmd]
        with open(log_path, "wb") as out:
            env, err = {**os.environ, **env}, subprocess.STDOUT
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)

    def wait(self) -> PeerServer:
        for _ in range(600):  # 3 minutes
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + self.ready, timeout=2).status_code == 200:
                    return self
            time.sleep(0.3)
        self.stop()
        said = (self.log_path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{self.name} not ready on {self.ready} (exit code {self.proc.returncode}): {said}")

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # then whatever of the group is left
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, sig)
                self.proc.wait(15)


def settle(server: Server) -> None:
    """Wait (30 s at most) until the server has done what wrk left in flight, under 5 % of a core: no backlog spills."""
    cpu = server.cpu_seconds()
    for _ in range(120):
        time.sleep(0.25)
        if -cpu + (cpu := server.cpu_seconds()) < 0.0125:  # the CPU seconds of these 0.25 s
            return


def per_run(load: Workload, clock, seconds: float) -> float:
    """The model alone on the workload's input, in this process, for `seconds` of `clock`: seconds a run."""
    load.bare()
    n, t0 = 0, clock()
    while clock() - t0 < seconds:
        n, _ = n + 1, load.bare()
    return (clock() - t0) / n


def serve(args, names: list[str], start, loads: list[Workload], results: dict, each_round) -> dict:
    """Start `names`, check each answer, time each round's workloads on them and alone; their peak RSS (MiB)."""
    servers: dict[str, Server] = {}
    try:
        servers.update((n, start(n).wait()) for n in names)  # one after another: none starts beside another's load
        for load in loads:
            (args.tmp / f"{id(load)}.body").write_bytes(load.body)
            for n in (n for n in load.paths if n in servers):
                check(load, n, servers[n].url, args.atol)
        for rnd in range(args.rounds):
            for load in loads:
                results.setdefault((load.label, "model"), []).append(1000 * per_run(load, time.process_time, 0.5))
                if load.large:
                    results.setdefault((load.label, "bare"), []).append(1 / per_run(load, time.perf_counter, 1.0))
                names = [n for n in load.paths if n in servers]
                for i, c in enumerate(args.large_concurrency if load.large else args.concurrency):
                    for name in names[(rnd + i) % len(names) :] + names[: (rnd + i) % len(names)]:
                        s, body = servers[name], args.tmp / f"{id(load)}.body"
                        w = Load(load.label, load.paths[name], body, ctype=load.ctype, ihcl=load.ihcl)
                        if args.warmup:
                            run_wrk(s.url, w, c, args.warmup, args.script)
                            settle(s)
                        r = wrk(s, w, c, args.coords_duration if load.coordinates else args.duration, args.script)
                        settle(s)
                        log.info(f"{load.label} c={c} {name}: {r['rps']:.0f} req/s, {r['cpu_ms_per_req']:.2f} CPU ms")
                        results.setdefault((load.label, c, name), []).append(r | {"load_avg": os.getloadavg()[0]})
            each_round(servers)
        return {n: s.peak_rss_mib() for n, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()


def run_peers(args) -> dict:
    """Ours (inr, inr2), each --baseline's (base, base2, …) and the peers, one thread a model; then, each restarted
    with its default threads, the large request beside bare onnxruntime's."""
    tree = [(b / "service" / "__main__.py").resolve(strict=True).parents[1] for b in args.baseline]  # checkouts
    args.baselines = {("base" if i == 0 else f"base{i + 1}"): b for i, b in enumerate(tree)}
    args.servers = [*args.servers, *args.baselines]
    info = {**machine(), "simd": lscpu().get("avx", []), "command": "python -m bench.peers " + " ".join(args.argv)}
    info |= {"load_avg_before": list(os.getloadavg()), "onnxruntime_threads": 1}
    info["baselines"] = {name: str(path) for name, path in args.baselines.items()}
    if peers := [n for n in args.servers if n in PEERS]:
        code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
        got = subprocess.run([args.peer_python, "-c", code, *peers, "onnxruntime"], capture_output=True, text=True)
        if got.returncode:
            raise RuntimeError(f"--peer-python lacks {', '.join(peers)} or onnxruntime: {got.stderr.strip()[-200:]}")
        info["peer_versions"] = json.loads(got.stdout)
    found = [] if args.scenario == "peers-large" else workloads(args.models, "astronaut", "digits", 2000)
    found += serving.large_workloads(args.models, "astronaut", args.large_coords) if args.large_coords else []
    for w in found:  # every baseline takes our paths
        w.paths.update({name: w.paths["base"] for name in args.baselines})
    loads, results = [w for w in found if any(n in args.servers for n in w.paths)], {}
    for threads, group in ((1, [w for w in loads if not w.large]), (0, [w for w in loads if w.large])):
        env = {"INR_PEER_MODELS": str(args.models.resolve()), "INR_PEER_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        env |= {"OMP_NUM_THREADS": str(threads or os.cpu_count()), "BENTOML_DO_NOT_TRACK": "True"}
        ours = [sys.executable, "-m", "service", "--models", str(args.models), "--port", "{port}", "--grpc-port"]
        ours += ["{grpc_port}", *(["--threads", str(threads)] if threads else []), "--log-level", "error"]

        def start(n: str, env=env, ours=ours, threads=threads) -> PeerServer:
            cmd = [args.peer_python, "-m", "bench.peer_apps", n, "--port", "{port}"] if n in PEERS else ours
            cmd, cwd = cmd + ["--workers", "2"] * (n == "inr2"), args.baselines.get(n, ROOT)
            return PeerServer(n, cmd, READY.get(n, "/health/ready"), env, args.tmp / f"{n}-{threads}.log", cwd)

        def save(servers: dict) -> None:
            so_far = {"machine": info, "rows": rows_from(results, loads, args), "partial": True}
            write_json(args.out.stem, so_far, args.out.parent)

        key = "peak_rss_mib" + ("" if threads else "_default_threads")
        if here := [n for n in args.servers if any(n in w.paths for w in group)]:
            info[key] = serve(args, here, start, group, results, save)
    return {"machine": info | {"load_avg_after": list(os.getloadavg())}, "rows": rows_from(results, loads, args)}


def rows_from(results: dict, loads: list[Workload], args, ours: str = "inr", rivals=PEERS) -> list[dict]:
    """A row per workload, concurrency and server: medians, and on `ours` of its ratios per round to the others."""
    rows, over = [], lambda rs, theirs: median([a["rps"] / b if b > 0 else float("inf") for a, b in zip(rs, theirs)])
    for load in (w for w in loads if (w.label, "model") in results):
        for c in args.large_concurrency if load.large else args.concurrency:
            names = [n for n in load.paths if (load.label, c, n) in results]
            for name, rs in ((n, results[(load.label, c, n)]) for n in names):
                row = {"load": load.label, "concurrency": c, "server": name, **summary(rs)}
                row["cores"] = median([r["rps"] * r["cpu_ms_per_req"] / 1000 for r in rs])
                row |= {"model_cpu_ms": median(results[(load.label, "model")]), "max_abs_diff": load.checks[name]}
                if name == ours and (peers := [n for n in names if n in rivals]):  # ours over the round's best
                    best = [max(results[(load.label, c, p)][r]["rps"] for p in peers) for r in range(len(rs))]
                    row["ratio_rounds"] = [round(a["rps"] / b, 2) if b > 0 else float("inf") for a, b in zip(rs, best)]
                    row["ratio_best_peer"] = over(rs, best)
                    if not load.large and rivals == PEERS:
                        row["target"] = 2.0 if load.coordinates else 1.0
                for base in (n for n in names if n.startswith("base") and name == ours):
                    theirs = [r["rps"] for r in results[(load.label, c, base)]]
                    row.setdefault("ratio_baseline", {})[base] = over(rs, theirs)
                if load.large:
                    bare = results[(load.label, "bare")]
                    row |= {"bare_rps": median(bare), "ratio_bare": over(rs, bare)}
                    if name == ours and c == 1:
                        row["target_bare"] = load.bare_target
                rows.append(row)
    return rows


def side_by_side(rows: list[dict], baselines: dict[str, str]) -> str:
    """peers' table: a line per workload and concurrency, every server's req/s (CPU ms/req) and ours over the others."""
    title = {**TITLES, **{n: f"--baseline {folder}" for n, folder in baselines.items()}}
    names = [n for n in title if any(r["server"] == n for r in rows)]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["load"], r["concurrency"]), {})[r["server"]] = r
    heads = [title[n] for n in names] + ["here ÷ best peer", "target"] + [f"here ÷ {b}" for b in baselines.values()]
    heads += ["bare onnxruntime, runs/s", "here ÷ bare (target)", "CPU: best peer ÷ here", "model alone, CPU ms"]
    lines = ["| workload | clients | " + " | ".join(heads) + " |", "|---|---:|" + "---:|" * len(heads)]
    for (load, c), by in cells.items():
        rate, ours = {n: f"{r['rps']:.0f}" if r["rps"] >= 100 else f"{r['rps']:.1f}" for n, r in by.items()}, by["inr"]
        vals = [f"{rate[n]} ({by[n]['cpu_ms_per_req']:.1f})" if n in by else "–" for n in names]
        vals.append(f"{ours['ratio_best_peer']:.2f}×" if "ratio_best_peer" in ours else "–")
        vals.append(f"≥ {ours['target']:g}×" if "target" in ours else "–")
        vals += [f"{ours.get('ratio_baseline', {}).get(b, float('nan')):.2f}×" for b in baselines]
        vals.append(f"{ours['bare_rps']:.1f}" if "bare_rps" in ours else "–")
        goal = f" (≥ {ours['target_bare']:g}×)" if ours.get("target_bare") else ""
        vals.append(f"{ours['ratio_bare']:.2f}×{goal}" if "ratio_bare" in ours else "–")
        peer_cpu = [r["cpu_ms_per_req"] for n, r in by.items() if n in PEERS]
        vals.append(f"{min(peer_cpu) / ours['cpu_ms_per_req']:.2f}×" if peer_cpu else "–")
        lines.append(f"| {load} | {c} | " + " | ".join([*vals, f"{ours['model_cpu_ms']:.2f}"]) + " |")
    return "\n".join(lines)


def run_serving(args) -> dict:
    """Batching on against off, one digit a request, with the floor and rows per run; renders with 1 and 2 workers."""
    repo, source = args.models, f"repository {args.models}"
    found = find_models(repo) if repo.is_dir() else {}
    if "digits" not in found or "image" not in found:  # stand-ins: the speed does not depend on the weights
        (repo := args.tmp / "models").mkdir()
        source, found = serving.make_standins(repo), find_models(repo)
    info = {**machine(), "models": source, "command": "python -m bench.peers " + " ".join(args.argv)}
    digits, results, floors, metrics, rows, render = found["digits"], {}, [], {}, [], {}
    live = Load("floor", "/v2/health/live", args.script, "GET")  # a GET sends no body
    pixels = np.random.default_rng(0).random((28, 28)).round(3)
    img, model = pixels.astype(np.float32)[None, None], ort_session(repo / digits / "1" / "model.onnx", 1)
    probs, bare = model.run(["probabilities"], {"images": img})[0], partial(model.run, None, {"images": img})
    v1, v2 = f"/v1/models/{digits}/classify", f"/v2/models/{digits}/infer"
    (binary, ihcl), octets = serving.v2_binary("images", img, "probabilities"), "application/octet-stream"
    body, read = json.dumps({"images": [pixels.tolist()]}).encode(), serving.v2_output("probabilities")
    loads = [Workload("v1 classify, JSON", {"on": v1, "off": v1}, body, probs, serving.v1_probabilities, bare=bare)]
    loads += [Workload("v2 infer, binary", {"on": v2, "off": v2}, binary, probs, read, octets, ihcl, bare=bare)]
    env = {"INR_MAX_QUEUE_DELAY_MS": str(args.delay_ms), **({"INR_THREADS": str(args.threads)} if args.threads else {})}
    envs = {"on": env, "off": env | {"INR_BATCHING": "false"}}

    def start(v: str) -> Server:
        return Server(repo, f"batching {v}", envs[v], args.classify_workers)

    def each_round(servers: dict) -> None:  # the floor: CPU per request of a route that does nothing, same round
        floors.append(wrk(servers["on"], live, 32, args.duration, args.script))
        metrics.update({v: per_batch(httpx.get(s.url + "/metrics").text, digits) for v, s in servers.items()})

    if "classify" not in args.skip:
        info["peak_rss_mib"] = serve(args, ["on", "off"], start, loads, results, each_round)
        rows = rows_from(results, loads, args, "on", ("off",))
        rows += [{"load": "GET /v2/health/live", "concurrency": 32, "server": "on", **summary(floors)}]
    load = Load("render", f"/v1/models/{found['image']}/render?width=64&height=64&format=png", args.script, "GET")
    for _ in range(0 if "render" in args.skip else args.rounds):
        for workers in (1, 2):
            s = Server(repo, f"{workers} workers", {}, workers=workers).wait()
            time.sleep(1)  # let every worker finish loading
            try:
                run_wrk(s.url, load, 4, 1, args.script)
                render.setdefault(workers, []).append(wrk(s, load, 4, 2 * args.duration, args.script))
            finally:
                s.stop()
    rows += [{"load": load.path, "concurrency": 4, "server": f"{w} workers", **summary(rs)} for w, rs in render.items()]
    return {"machine": info | {"load_after": os.getloadavg()[0]}, "rows": rows, "server_metrics": metrics}


def per_batch(metrics: str, model: str) -> dict:
    """From a server's own metrics: rows and requests per onnxruntime run and compute milliseconds per row."""
    v: dict[str, float] = {}
    for s in (s for f in families(metrics) for s in f.samples if s.labels.get("model") == model):
        v[s.name] = v.get(s.name, 0.0) + s.value
    rows, runs = v["nv_inference_count_total"], v["nv_inference_exec_count_total"]
    ms, requests = 1000 * v["inr_inference_compute_duration_seconds_sum"], v["inr_batch_requests_sum"]
    return {"rows_per_run": rows / runs, "requests_per_run": requests / runs, "compute_ms_per_row": ms / rows}


def rows_table(rows: list[dict]) -> str:
    """Rows of any scenario, a line each: req/s, p50, p99, CPU ms a request, ours over the best rival."""
    lines = ["| load | clients | server | req/s | p50 ms | p99 ms | CPU ms | ÷ rival |", "|---|---:|---|" + "---:|" * 5]
    for r in rows:
        cells = [f"{r[k]:.{n}f}" for k, n in (("rps", 1), ("p50_ms", 1), ("p99_ms", 1), ("cpu_ms_per_req", 2))]
        cells.append(f"{r['ratio_best_peer']:.2f}×" if "ratio_best_peer" in r else "")
        lines.append(f"| {r['load']} | {r['concurrency']} | {r['server']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


INTS = {"type": lambda text: [positive_int(v) for v in text.split(",")]}
OPTIONS = [  # flag, argparse keywords, default in peers, in serving (None: not its option), help
    ("--models", {"type": Path}, ROOT / "models", ROOT / "models", "the model repository"),
    ("--concurrency", INTS, [1, 8, 32], [1, 8, 32, 64], "clients, comma-separated"),
    ("--duration", {"type": positive_int}, 3, 3, "seconds per wrk run (wrk's unit; serving's renders: twice that)"),
    ("--warmup", {"type": int}, 1, 1, "seconds of wrk before each timed run (0: none)"),
    ("--rounds", {"type": positive_int}, 3, 5, "rounds, the order rotating; a row keeps the medians"),
    ("--threads", {"type": int}, None, 0, "INR_THREADS of both servers (0: the default)"),
    ("--atol", {"type": float}, 1e-5, 1e-5, "largest difference from onnxruntime accepted"),
    ("--out", {"type": Path}, RESULTS / "peers.json", RESULTS / "serving.json", "the result file"),
    ("--servers", {"type": lambda t: t.split(",")}, ["inr", *PEERS], None, "of " + ", ".join(TITLES)),
    ("--peer-python", {}, sys.executable, None, "the interpreter that has the peers installed"),
    ("--baseline", {"type": Path, "action": "append"}, [], None, "another checkout of this project: base, base2, …"),
    ("--coords-duration", {"type": positive_int}, 6, None, "seconds per wrk run of the coordinate workloads"),
    ("--large-coords", {"type": int}, 20_000, None, "coordinates of the large request (0: none)"),
    ("--large-concurrency", INTS, [1, 8], None, "clients of the large request"),
    ("--delay-ms", {"type": float}, None, 0.5, "INR_MAX_QUEUE_DELAY_MS of both servers"),
    ("--classify-workers", {"type": int}, None, 1, "uvicorn workers of both servers"),
    ("--skip", {"action": "append", "choices": ("classify", "render")}, None, [], "leave out classify or render"),
]


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name in ("peers", "peers-large", "serving"):
        s = sub.add_parser(name)
        for flag, kw, *defaults, what in OPTIONS:
            if (default := defaults[name == "serving"]) is not None:
                s.add_argument(flag, **kw, default=default, help=what)
    args = p.parse_args(argv)
    args.argv, serving = list(sys.argv[1:] if argv is None else argv), args.scenario == "serving"
    servers = [] if serving else args.servers
    for wrong, says in (
        ({*servers} - {*TITLES} or servers and "inr" not in servers, f"--servers: of {', '.join(TITLES)}, with inr"),
        (servers and not (args.models / "digits").is_dir(), f"--models {args.models} has no digits model"),
        (args.scenario == "peers-large" and not args.large_coords, "peers-large needs --large-coords above 0"),
        (shutil.which("wrk") is None, "wrk is not installed (Debian: apt-get install -y wrk)"),
    ):
        if wrong:
            sub.choices[args.scenario].error(says)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp, args.script = Path(tmp), Path(tmp) / "bench.lua"
        args.script.write_text(LUA)
        try:
            result = run_serving(args) if serving else run_peers(args)
        except (RuntimeError, ValueError, OSError) as e:
            sys.stderr.write(f"error: {e}\n")
            return 2
    write_json(args.out.stem, result, args.out.parent)
    folders = {name: path.name for name, path in getattr(args, "baselines", {}).items()}
    log.info("\n%s", rows_table(result["rows"]) if serving else side_by_side(result["rows"], folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
