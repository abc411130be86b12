"""A giant fitted the way users do it (issue 38, docs/benchmarks.md "giant"): the 108 MP mosaic (bench/giant.py
make) uploaded to the real service's POST /v1/fits, streamed into INR_FIT_UPLOADS, split into blocks by a worker and
fitted by `--workers` real workers (`python -m training worker`, one torch thread each), published as one version.

    python -m bench.giant_http --work /tmp/giant [--workers 2] [--file mosaic.png] [--name giant-http] [--key http]

First a 4 MP reference (ref4mp.png, fitted whole: `size` 2400, its native longer side) through the same queue on
the same workers, so that the giant's worker-seconds per MP are compared with a one-model fit's in the same run.
Measured: the upload's time and the API's RSS while it streams (sampled every 20 ms, and its VmHWM); the split;
each piece's time on its worker against its fit's own seconds (the queue's cost per piece); the whole job's wall
time; the workers' CPU-seconds in each phase (from /proc: a ratio that a loaded machine moves less than wall time's);
every worker's peak RSS (VmHWM). The model lands in WORK/models/NAME for
`python -m bench.giant serve --model NAME`.
Results: bench/results/giant.json, key `http` (or `--key`, so that a rerun keeps the earlier result beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bench.common import ROOT
from bench.giant import save
from bench.procs import cpu_seconds as cpu_s
from bench.procs import status_kib
from bench.serving import free_port
from fitstore import FitStore


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env}, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def wait(client: httpx.Client, job: str, every: float = 2.0) -> dict:
    while True:
        rec = client.get(f"/v1/fits/{job}").json()
        if rec["state"] in ("succeeded", "failed", "cancelled"):
            return rec
        time.sleep(every)


def upload(client: httpx.Client, path: Path, api_pid: int, **fields) -> tuple[dict, dict]:
    """POST the file as it is read from disk (httpx streams a file object), sampling the API's RSS meanwhile."""
    samples, done = [], threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(status_kib(api_pid, "VmRSS") / 1024)
            time.sleep(0.02)

    before = status_kib(api_pid, "VmRSS") / 1024
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    with path.open("rb") as f:
        r = client.post("/v1/fits", files={"file": (path.name, f, "image/png")}, data=fields)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    if r.status_code != 202:
        raise SystemExit(f"POST /v1/fits: {r.status_code} {r.text[:500]}")
    size = path.stat().st_size
    return r.json(), {
        "bytes": size,
        "seconds": round(seconds, 2),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "api_rss_mib_before": round(before),
        "api_rss_mib_max_during": round(max(samples, default=before)),
        "api_vmhwm_mib_after": round(status_kib(api_pid, "VmHWM") / 1024),
    }


def pieces_report(store: FitStore, parent: dict, models: Path) -> dict:
    """Each piece's wall time on its worker (started → finished in the store) against its fit's own seconds (the
    published version's `block_fits`: the pieces leave the store when it is published)."""
    meta = json.loads(
        sorted((models / parent["name"]).glob("*/metadata.json"), key=lambda p: int(p.parent.name))[-1].read_text()
    )
    fits = {key: fit["seconds"] for key, fit in meta["block_fits"].items()}
    walls, over = [], []
    for child in store.children(parent):
        wall = child["finished"] - child["started"]
        walls.append(wall)
        over.append(wall - fits.get(child["piece"], wall))
    return {
        "pieces": len(walls),
        "piece_wall_s_median": round(statistics.median(walls), 1),
        "piece_wall_s_max": round(max(walls), 1),
        "queue_cost_per_piece_s_median": round(statistics.median(over), 2),
        "queue_cost_per_piece_s_max": round(max(over), 2),
        "attempts": sorted(c["attempt"] for c in store.children(parent)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/giant"))
    p.add_argument("--file", default="mosaic.png")
    p.add_argument("--name", default="giant-http")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--key", default="http", help="the key in bench/results/giant.json (default: %(default)s)")
    args = p.parse_args(argv)
    run = args.work / "http"
    (run / "uploads").mkdir(parents=True, exist_ok=True)
    models = args.work / "models"
    models.mkdir(exist_ok=True)
    store_url = f"sqlite:///{run / 'fits.sqlite'}"
    env = {
        "INR_FIT_STORE": store_url,
        "INR_FIT_UPLOADS": str(run / "uploads"),
        "INR_FIT_MAX_RUNNING": str(args.workers),
        "INR_FIT_QUEUE_LIMIT": "64",
        "INR_FIT_DEADLINE_S": "3600",
        "INR_FIT_ANONYMOUS_MAX_PIXELS": str(10**9),  # no key here: the bench's uploads are its own (issue 45's cap)
        "OMP_NUM_THREADS": "1",
    }
    port = free_port()
    argv = [sys.executable, "-m", "service", "--models", str(models), "--port", str(port), "--grpc-port", "0"]
    api = start(argv, env, run / "api.log")  # no gRPC: its port may be another server's
    workers = [
        start(
            [sys.executable, "-m", "training", "worker", "--threads", "1", "--nice", "0", "--models", str(models)],
            env,
            run / f"worker{k}.log",
        )
        for k in range(args.workers)
    ]
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=3600)
    store = FitStore(store_url)
    out: dict = {"workers": args.workers, "torch_threads_per_worker": 1, "file": args.file}
    try:
        while True:
            if api.poll() is not None:
                raise SystemExit(f"the service stopped: {(run / 'api.log').read_text()[-1000:]}")
            try:
                if client.get("/v2/health/ready").status_code == 200 and len(store.workers()) == args.workers:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pids = [w.pid for w in workers]
        t0, c0 = time.perf_counter(), cpu_s(pids)
        rec, _ = upload(client, args.work / "ref4mp.png", api.pid, name=f"{args.name}-ref", size="2400")
        ref = wait(client, rec["id"])
        out["ref_4mp"] = {
            "state": ref["state"],
            "wall_s": round(time.perf_counter() - t0, 1),
            "fit_s": round(ref["finished"] - ref["started"], 1),
            "worker_cpu_s": round(cpu_s(pids) - c0, 1),
            "worker_peak_rss_mib": [round(status_kib(pid, "VmHWM") / 1024) for pid in pids],
            "metrics": ref.get("metrics"),
        }
        save(args.key, out)
        for pid in pids:  # the giant's own peaks from here: "5" resets a process's VmHWM (proc(5), clear_refs)
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        t0, c0 = time.perf_counter(), cpu_s(pids)
        rec, out["upload"] = upload(client, args.work / args.file, api.pid, name=args.name)
        out["source"] = rec["source"]
        parent = wait(client, rec["id"])
        out["wall_s"] = round(time.perf_counter() - t0, 1)
        out["worker_cpu_s"] = round(cpu_s(pids) - c0, 1)
        out["worker_peak_rss_mib"] = [round(status_kib(pid, "VmHWM") / 1024) for pid in pids]
        out["state"], out["error"], out["metrics"] = parent["state"], parent.get("error"), parent.get("metrics")
        full = store.get(rec["id"])
        out["layout"] = full.get("layout")
        if full.get("children"):
            out.update(pieces_report(store, full, models))
        mp = rec["source"]["width"] * rec["source"]["height"] / 1e6
        ref_mp = 2400 * 1728 / 1e6
        out["worker_s_per_mp"] = round(out["wall_s"] * args.workers / mp, 2)
        out["ref_worker_s_per_mp"] = round(out["ref_4mp"]["fit_s"] / ref_mp, 2)
        out["ratio_to_ref"] = round(out["worker_s_per_mp"] / out["ref_worker_s_per_mp"], 3)
        out["worker_cpu_s_per_mp"] = round(out["worker_cpu_s"] / mp, 2)
        out["ref_worker_cpu_s_per_mp"] = round(out["ref_4mp"]["worker_cpu_s"] / ref_mp, 2)
        out["cpu_ratio_to_ref"] = round(out["worker_cpu_s_per_mp"] / out["ref_worker_cpu_s_per_mp"], 3)
        out["uploads_left"] = sorted(p.name for p in (run / "uploads").iterdir())
        out["api_peak_rss_mib"] = round(status_kib(api.pid, "VmHWM") / 1024)
    finally:
        save(args.key, out)
        store.close()
        client.close()
        for proc in [*workers, api]:
            proc.terminate()
        for proc in [*workers, api]:
            proc.wait(120)
    sys.stdout.write(f"{out}\n")
    return 0 if out.get("state") == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main())
