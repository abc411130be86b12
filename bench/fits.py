"""Fits over HTTP (docs/benchmarks.md, fits). Upload to first served render against the CLI, the PSNR it
reaches, and what a running fit does to serving latency.

1. `overhead`: a 256² photo (scikit-image's `coffee`, centre square) with the default preset.
   - service: POST /v1/fits → a worker fits it → the API (poll mode) serves the version → the first
     200 from its version-pinned render; timed from the POST.
   - cli: `python -m training fit-image --out` with the same options, into the same repository, timed
     from the command's start to the first served render of its version.
   Both with the same torch threads (--fit-threads) and nice 0, alternating, `--rounds` times.
2. `serving`: p50/p99 of a one-digit v1 classify and of a 256² render (render cache off, a new
   rotation each time) from one client, idle and while a worker fits a long job, in the same run:
   `fair` is the worker's defaults (nice 10, one torch thread), `unfair` nice 0 and two threads.

    python -m bench.fits                    # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from .common import ROOT, machine, median, setup_logging, write_json
from .serving import Server

log = logging.getLogger("bench.fits")


def coffee_png(path: Path, size: int) -> Path:
    from PIL import Image
    from skimage import data

    img = Image.fromarray(data.coffee())
    side = min(img.size)
    left, top = (img.width - side) // 2, (img.height - side) // 2
    img.crop((left, top, left + side, top + side)).resize((size, size), Image.LANCZOS).save(path)
    return path


def first_render(url: str, name: str, version: int, deadline: float) -> float:
    """Poll the version-pinned render until it answers 200; the time it did."""
    while time.monotonic() < deadline:
        r = httpx.get(
            f"{url}/v1/models/{name}/versions/{version}/render", params={"width": 64, "height": 64}, timeout=60
        )
        if r.status_code == 200:
            return time.perf_counter()
        time.sleep(0.05)
    raise RuntimeError(f"{name} version {version} was not served in time")


def via_service(srv: Server, photo: Path, models: Path, name: str, args) -> dict:
    t0 = time.perf_counter()
    with photo.open("rb") as f:
        r = httpx.post(
            f"{srv.url}/v1/fits",
            files={"file": (photo.name, f, "image/png")},
            data={"preset": args.preset, "size": str(args.size), "name": name},
            timeout=60,
        )
    r.raise_for_status()
    job = r.json()["id"]
    deadline = time.monotonic() + args.timeout_s
    # follow the job as the viewer does: its event stream, until the final event
    with httpx.stream("GET", f"{srv.url}/v1/fits/{job}/events", timeout=args.timeout_s) as events:
        for line in events.iter_lines():
            if line.startswith("event: ") and line[7:] in ("succeeded", "failed", "cancelled"):
                break
    rec = httpx.get(f"{srv.url}/v1/fits/{job}", timeout=30).json()
    if rec["state"] != "succeeded":
        raise RuntimeError(f"fit {job} ended {rec['state']}: {rec.get('error')}")
    done = time.perf_counter()
    served = first_render(srv.url, name, rec["version"], deadline)
    return {
        "path": "service",
        "seconds": served - t0,
        "fit_done_s": done - t0,
        "metrics": rec["metrics"],
        "train_s": train_seconds(models, name, rec["version"]),
    }


def train_seconds(models: Path, name: str, version: int) -> float:
    return json.loads((models / name / str(version) / "metadata.json").read_text())["training"]["train_seconds"]


def via_cli(srv: Server, photo: Path, models: Path, name: str, args) -> dict:
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            str(photo),
            "--size",
            str(args.size),
            "--no-progress",
            "--out",
            str(models / name),
        ],
        cwd=ROOT,
        check=True,
        env={**_env(args.fit_threads)},
        stdout=subprocess.DEVNULL,
    )
    done = time.perf_counter()
    served = first_render(srv.url, name, 1, time.monotonic() + args.timeout_s)
    meta = json.loads((models / name / "1" / "metadata.json").read_text())
    return {
        "path": "cli",
        "seconds": served - t0,
        "fit_done_s": done - t0,
        "metrics": meta["metrics"],
        "train_s": meta["training"]["train_seconds"],
    }


def _env(threads: int) -> dict:
    import os

    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def worker(store: str, models: Path, threads: int, nice: int, log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "training",
            "worker",
            "--store",
            store,
            "--models",
            str(models),
            "--threads",
            str(threads),
            "--nice",
            str(nice),
        ],
        cwd=ROOT,
        env=_env(threads),
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
    )


def latencies(url: str, n: int, digit: bytes) -> dict:
    out = {"classify": [], "render": []}
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            t = time.perf_counter()
            c.post(
                f"{url}/v1/models/digits/classify", files={"files": ("d.png", digit, "image/png")}
            ).raise_for_status()
            out["classify"].append(time.perf_counter() - t)
            t = time.perf_counter()
            c.get(
                f"{url}/v1/models/astronaut/render", params={"width": 256, "height": 256, "rotate": (i * 0.37) % 360}
            ).raise_for_status()
            out["render"].append(time.perf_counter() - t)
    return {
        k: {"p50_ms": 1000 * float(np.percentile(v, 50)), "p99_ms": 1000 * float(np.percentile(v, 99)), "n": len(v)}
        for k, v in out.items()
    }


def fitting_latencies(
    srv: Server, store: str, models: Path, photo: Path, digit: bytes, threads: int, nice: int, log_path: Path, args
) -> dict:
    """Serving latencies while one long fit runs on a worker with these threads and nice value."""
    w = worker(store, models, threads, nice, log_path)
    try:
        with photo.open("rb") as f:
            job = httpx.post(
                f"{srv.url}/v1/fits",
                files={"file": ("coffee.png", f, "image/png")},
                data={"size": str(args.size), "steps": "20000", "name": f"busy{nice}"},
                timeout=60,
            ).json()
        while httpx.get(f"{srv.url}/v1/fits/{job['id']}", timeout=30).json()["step"] < 1:
            time.sleep(0.2)
        step0 = httpx.get(f"{srv.url}/v1/fits/{job['id']}", timeout=30).json()["step"]
        out = latencies(srv.url, args.requests, digit)
        out["fit_steps_during"] = httpx.get(f"{srv.url}/v1/fits/{job['id']}", timeout=30).json()["step"] - step0
        httpx.delete(f"{srv.url}/v1/fits/{job['id']}", timeout=30)
    finally:
        w.terminate()
        w.wait(60)
    return {**out, "worker_threads": threads, "worker_nice": nice}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--preset", default="fourier")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--fit-threads", type=int, default=2, help="torch threads of both paths in `overhead`")
    p.add_argument("--requests", type=int, default=150, help="classify + render pairs per serving condition")
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--parts", default="overhead,serving")
    p.add_argument("--name", default="fits")
    args = p.parse_args(argv)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="bench-fits-"))
    models = tmp / "models"
    shutil.copytree(ROOT / "models", models)
    store = f"sqlite:///{tmp}/fits.sqlite"
    photo = coffee_png(tmp / "coffee.png", args.size)
    env = {
        "INR_FIT_STORE": store,
        "INR_MODEL_CONTROL_MODE": "poll",
        "INR_REPOSITORY_POLL_SECS": "0.5",
        "INR_RENDER_CACHE_BYTES": "0",
        "INR_FIT_QUEUE_LIMIT": "50",
    }
    srv = Server(models, "fits", env).wait()
    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": vars(args),
        "overhead": [],
        "serving": {},
    }
    try:
        if "overhead" in args.parts:
            w = worker(store, models, args.fit_threads, 0, tmp / "worker.log")
            from fitstore import FitStore

            while not FitStore(store).workers():  # started: torch imported, heartbeat sent
                time.sleep(0.2)
            try:
                for k in range(args.rounds):
                    for path in ("service", "cli"):
                        row = (
                            via_service(srv, photo, models, f"svc{k}", args)
                            if path == "service"
                            else via_cli(srv, photo, models, f"cli{k}", args)
                        )
                        log.info(
                            "%s round %d: %.1f s to the first served render (fit done at %.1f s, training %.1f s)",
                            path,
                            k,
                            row["seconds"],
                            row["fit_done_s"],
                            row["train_s"],
                        )
                        result["overhead"].append(row)
            finally:
                w.terminate()
                w.wait(60)
            svc = [r["seconds"] for r in result["overhead"] if r["path"] == "service"]
            cli = [r["seconds"] for r in result["overhead"] if r["path"] == "cli"]
            result["overhead_ratio"] = median(svc) / median(cli)
            log.info(
                "service / cli: %.3f (medians %.1f s / %.1f s)", result["overhead_ratio"], median(svc), median(cli)
            )
        if "serving" in args.parts:
            from tests.servers import draw_digit, png_bytes

            digit = png_bytes(draw_digit(3, size=64))
            latencies(srv.url, 10, digit)  # warm up
            result["serving"]["idle"] = latencies(srv.url, args.requests, digit)
            for mode, threads, nice in (("fair", 1, 10), ("unfair", 2, 0)):
                result["serving"][mode] = fitting_latencies(
                    srv, store, models, photo, digit, threads, nice, tmp / f"worker-{mode}.log", args
                )
                for kind in ("classify", "render"):
                    idle, busy = result["serving"]["idle"][kind], result["serving"][mode][kind]
                    log.info(
                        "%s, worker %s (threads %d, nice %d): idle p50 %.1f p99 %.1f ms; with a fit p50 %.1f "
                        "p99 %.1f ms (p99 %.2f×)",
                        kind,
                        mode,
                        threads,
                        nice,
                        idle["p50_ms"],
                        idle["p99_ms"],
                        busy["p50_ms"],
                        busy["p99_ms"],
                        busy["p99_ms"] / idle["p99_ms"],
                    )
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    write_json(args.name, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
