"""One model or blocks (issue 47, docs/benchmarks.md "blocks"): a photo through POST /v1/fits against `fit-image` on
the same photo, side by side in one run, and what blocks cost beside one model of the same pixels.

    python -m bench.blocks compare --photo PHOTO [--rounds 3] [--threads 2] [--variants cli,api,api-blocks]
    python -m bench.blocks memory PHOTO ... [--steps 20]
    python -m bench.blocks overhead MODELS/NAME/N       # a block model's overview and overlaps against its cores

`compare`: every round runs each variant once, the order rotating from round to round, all with the round's seed:
  cli         `python -m training fit-image --image PHOTO --out ...` with the grid preset's options, 280 steps, every
              pixel: one model;
  api         POST /v1/fits with the defaults, fitted by a fresh `python -m training worker` (one model, when the
              worker's memory holds one);
  api-blocks  the same with `blocks=always`: the blocks of 2048 and the overview, fitted by one fresh worker.
Each is a fresh process (the CLI, or the worker, started once the job is queued and stopped with SIGTERM once it
ended): its CPU (user + system, from wait4: imports included on both sides alike), its peak RSS (ru_maxrss) and
its wall time (start to version written). The version's ONNX bytes (model.onnx and blocks/*.onnx) per pixel; the
PSNR over all pixels of what the service serves (`/v1/models/NAME/versions/N/render` at the native size, strips of
256 rows, PNG, against the photo) and, for blocks, in 16-px bands around the inner block borders and elsewhere.

`memory`: each photo fitted as one model through POST /v1/fits by a fresh `worker --once --memory 64GiB` (so that
none goes in blocks): its peak RSS, against the bound training/worker/memory.py decides with.
Results: bench/results/blocks.json (key `compare` or `memory`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from bench.common import RESULTS, ROOT, machine
from bench.giant_serve import free_port
from fitstore import PRESETS
from modelrepo.blocks import BlockLayout

OUT = RESULTS / "blocks.json"
STRIP = 256  # rows per render of the PSNR pass
BAND = 8  # pixels each side of an inner block border: the seam band


class Stack:
    """The service (poll mode, so that each version is served within a second) on a fresh store, models and uploads
    folder under `work`."""

    def __init__(self, work: Path, threads: int):
        self.work, self.models, self.threads = work, work / "models", threads
        for d in (self.models, work / "uploads", work / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "INR_FIT_STORE": f"sqlite:///{work / 'fits.sqlite'}",
            "INR_FIT_UPLOADS": str(work / "uploads"),
            "INR_FIT_DEADLINE_S": "7200",
            "INR_FIT_QUEUE_LIMIT": "16",
            "INR_RENDER_TIMEOUT_S": "600",
            "INR_RENDER_CACHE_BYTES": "0",
            "OMP_NUM_THREADS": str(threads),
        }
        port = free_port()
        argv = [sys.executable, "-m", "service", "--models", str(self.models), "--port", str(port)]
        argv += ["--model-control-mode", "poll", "--repository-poll-secs", "1", "--grpc-port", "0"]
        log = (work / "logs" / "api.log").open("ab")
        self.api = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.client.get("/v2/health/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit("the service did not start")

    def worker(self, *extra: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "training", "worker", "--threads", str(self.threads), "--nice", "0"]
        log = (self.work / "logs" / "workers.log").open("ab")
        return subprocess.Popen([*argv, "--models", str(self.models), *extra], cwd=ROOT, env=self.env, stderr=log)

    def stop(self) -> None:
        self.client.close()
        self.api.terminate()
        self.api.wait(60)


def reaped(proc: subprocess.Popen) -> dict:
    """Wait for the child; its CPU seconds and peak RSS from the kernel."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_rss_mib": round(ru.ru_maxrss / 1024),
        "rc": proc.returncode,
    }


def via_cli(stack: Stack, photo: Path, name: str, seed: int) -> dict:
    argv = [sys.executable, "-m", "training", "fit-image", "--image", str(photo), "--out", str(stack.models / name)]
    argv += [*PRESETS["grid"]["argv"], "--steps", str(PRESETS["grid"]["steps"]), "--protocol", "full", "--no-progress"]
    argv += ["--seed", str(seed)]
    t0 = time.perf_counter()
    log = stack.work / "logs" / f"{name}.log"
    proc = subprocess.Popen(argv, cwd=ROOT, env=stack.env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    out = reaped(proc)
    if out["rc"]:
        raise SystemExit(f"fit-image failed: {log.read_text()[-2000:]}")
    return {**out, "wall_s": round(time.perf_counter() - t0, 1), "version": 1}


def via_api(stack: Stack, photo: Path, name: str, fields: dict, *worker_args: str) -> dict:
    with photo.open("rb") as f:
        r = stack.client.post("/v1/fits", files={"file": (photo.name, f)}, data={"name": name, **fields})
    r.raise_for_status()
    job = r.json()["id"]
    t0 = time.perf_counter()
    proc = stack.worker(*worker_args)
    while (rec := stack.client.get(f"/v1/fits/{job}").json())["state"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    try:
        os.kill(proc.pid, signal.SIGTERM)  # not proc.poll(): that would reap it, and its rusage with it
    except ProcessLookupError:
        pass
    out = reaped(proc)
    if rec["state"] != "succeeded":
        raise SystemExit(f"fit {job} {rec['state']}: {rec.get('error')}")
    return {**out, "wall_s": round(wall, 1), "version": rec["version"], "job": job, "recorded": rec["metrics"]}


def served(stack: Stack, name: str, version: int, truth: np.ndarray) -> dict:
    """The served version's PSNR over all pixels, and for a block model in the bands around its inner borders."""
    meta = json.loads((stack.models / name / str(version) / "metadata.json").read_text())
    h, w = truth.shape[:2]
    band = np.zeros((h, w), bool)
    if "blocks" in meta:
        layout = BlockLayout.from_metadata(meta["blocks"])
        for e in layout.x_edges[1:-1]:
            band[:, e - BAND : e + BAND] = True
        for e in layout.y_edges[1:-1]:
            band[e - BAND : e + BAND, :] = True
    deadline = time.monotonic() + 120
    path = f"/v1/models/{name}/versions/{version}/render"
    while stack.client.get(path, params={"width": 8, "height": 8}).status_code != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} version {version} was not served")
        time.sleep(0.5)
    err = np.empty((h, w), np.float64)
    for y0 in range(0, h, STRIP):
        rows = min(STRIP, h - y0)
        r = stack.client.get(path, params={"width": w, "height": rows, "viewport": f"0,{y0 / h},1,{(y0 + rows) / h}"})
        r.raise_for_status()
        got = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), np.float64)
        err[y0 : y0 + rows] = (((got - truth[y0 : y0 + rows]) / 255.0) ** 2).mean(axis=2)
    out = {"psnr": db(err.mean())}
    if band.any():
        out |= {"psnr_seams": db(err[band].mean()), "psnr_elsewhere": db(err[~band].mean())}
    onnx = [p for p in (stack.models / name / str(version)).rglob("*.onnx")]
    out["bytes"] = sum(p.stat().st_size for p in onnx)
    out["bytes_per_px"] = round(out["bytes"] / (w * h), 3)
    out["files"] = len(onnx)
    if "block_fits" in meta:
        out["pieces"] = meta["block_fits"]
        out["overhead"] = overhead(stack.models / name / str(version))
    return out


def overhead(version: Path) -> dict:
    """What the overview and the overlaps cost beside the blocks' cores, from a block model's version folder: bytes
    (the files) and fit seconds (metadata `block_fits`), each block's share of its core's pixels counted as the cost
    the same pixels would have in one model at the blocks' rate."""
    meta = json.loads((version / "metadata.json").read_text())
    layout = BlockLayout.from_metadata(meta["blocks"])
    xs, ys, fits = layout.x_edges, layout.y_edges, meta["block_fits"]
    core = {"bytes": 0.0, "seconds": 0.0}
    extra = {"bytes": float((version / "model.onnx").stat().st_size), "seconds": fits["overview"]["seconds"]}
    for b in layout.blocks:
        share = (xs[b.col + 1] - xs[b.col]) * (ys[b.row + 1] - ys[b.row]) / (b.w * b.h)
        for key, value in (("bytes", (version / b.file).stat().st_size), ("seconds", fits[b.file]["seconds"])):
            core[key] += value * share
            extra[key] += value * (1 - share)
    return {
        "overview_and_overlaps_bytes": round(extra["bytes"] / core["bytes"], 4),
        "overview_and_overlaps_fit_seconds": round(extra["seconds"] / core["seconds"], 4),
        "overview": meta["blocks"].get("overview"),
    }


def db(mse: float) -> float:
    return round(float(10 * np.log10(1 / max(mse, 1e-12))), 3)


def compare(args) -> dict:
    truth = np.asarray(Image.open(args.photo).convert("RGB"), np.float64)
    stack = Stack(args.work, args.threads)
    rows = []
    try:
        for r in range(args.rounds):
            order = args.variants[r % len(args.variants) :] + args.variants[: r % len(args.variants)]
            for variant in order:
                name = f"{variant}-r{r}"
                # a seed per round: the same fit on every path, and no blocks taken from the round before (a job of
                # the same bytes and options reuses the pieces an earlier one wrote)
                if variant == "cli":
                    got = via_cli(stack, args.photo, name, r)
                else:
                    fields = {"seed": str(r)} | ({"blocks": "always"} if variant == "api-blocks" else {})
                    got = via_api(stack, args.photo, name, fields)
                got |= served(stack, name, got["version"], truth)
                rows.append({"variant": variant, "round": r, **got})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        stack.stop()
    summary = {}
    for v in args.variants:
        mine = [row for row in rows if row["variant"] == v]
        summary[v] = {k: statistics.median(row[k] for row in mine) for k in ("wall_s", "cpu_s", "bytes_per_px", "psnr")}
        summary[v]["peak_rss_mib"] = max(row["peak_rss_mib"] for row in mine)
    ref = summary.get("cli")
    if ref:
        for v, s in summary.items():
            s["ratio_to_cli"] = {k: round(s[k] / ref[k], 3) for k in ("wall_s", "cpu_s", "bytes_per_px")}
    h, w = truth.shape[:2]
    return {"photo": args.photo.name, "size": [w, h], "threads": args.threads, "rows": rows, "summary": summary}


def memory(args) -> dict:
    from training.worker.memory import one_model_peak

    stack = Stack(args.work, args.threads)
    rows = []
    try:
        for k, photo in enumerate(args.photos):
            w, h = Image.open(photo).size
            got = via_api(stack, photo, f"mem{k}", {"steps": str(args.steps)}, "--once", "--memory", "64GiB")
            bound = one_model_peak(w * h) / 2**20
            rows.append({"photo": photo.name, "mp": round(w * h / 1e6, 2), **got, "bound_mib": round(bound)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stack.stop()
    return {"steps": args.steps, "threads": args.threads, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.blocks")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--photo", type=Path, required=True)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--variants", type=lambda t: t.split(","), default=["cli", "api", "api-blocks"])
    c.add_argument("--work", type=Path, default=Path("/tmp/bench-blocks"))
    m = sub.add_parser("memory")
    m.add_argument("photos", type=Path, nargs="+")
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--work", type=Path, default=Path("/tmp/bench-blocks-memory"))
    o = sub.add_parser("overhead", help="the overview's and the overlaps' cost in a block model's version folder")
    o.add_argument("version", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "overhead":
        print(json.dumps(overhead(a.version)))
        return 0
    result = compare(a) if a.cmd == "compare" else memory(a)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[a.cmd] = {
        **result,
        "machine": machine(),
        "command": "python -m bench.blocks " + " ".join(argv or sys.argv[1:]),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(result.get("summary", result.get("rows")), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
