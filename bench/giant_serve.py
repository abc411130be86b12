"""bench.giant serve: the blocked model of bench.giant's mosaic served by `python -m service` under a memory budget.

* **PSNR over all pixels**, and in a 16-px band around the block borders (the seams) against the rest: the mosaic
  rendered at its native size in strips (`/v1/models/giant/render` with a viewport per strip) against its pixels.
* **Tiles**: a cold first 512² IIIF tile of each block (the block loaded by that request), then warm ones (the
  block resident, the tile not cached).
* **Browse**: what OpenSeadragon asks for, every tile of every level of info.json's pyramid from the whole view down
  to native size, with the service's peak RSS (VmHWM) against its budget.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

import bigimage
from bench.common import ROOT
from bench.procs import status_kib
from bench.serving import free_port
from modelrepo.blocks import BlockLayout

TILE = (2400, 1500)  # each photo's crop in the mosaic `python -m bench.giant make` builds
STRIP = 500  # rows per render of the PSNR pass
BAND = 8  # pixels each side of a block border


class Service:
    def __init__(self, models: Path, budget: str):
        self.port = free_port()
        env = {**os.environ, "INR_RENDER_TIMEOUT_S": "600"}
        argv = [sys.executable, "-m", "service", "--models", str(models), "--port", str(self.port), "--grpc-port", "0"]
        self.proc = subprocess.Popen([*argv, "--memory-budget", budget], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        for _ in range(600):
            try:
                if self.client.get("/v2/health/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("the service did not start")

    def peak_mib(self) -> float:
        return status_kib(self.proc.pid, "VmHWM") / 1024

    def rss_mib(self) -> float:
        return status_kib(self.proc.pid, "VmRSS") / 1024

    def get(self, path: str, **params) -> tuple[float, bytes]:
        t0 = time.perf_counter()
        r = self.client.get(path, params=params)
        r.raise_for_status()
        return time.perf_counter() - t0, r.content

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(60)


def psnr(se: float, n: float) -> float:
    return round(float(10 * np.log10(n / se)), 3)


def quality(svc: Service, name: str, mosaic: Path, layout: BlockLayout) -> dict:
    w, h = layout.width, layout.height
    band = np.zeros((h, w), bool)  # a bool per pixel: 108 MB for 108 MP
    for e in layout.x_edges[1:-1]:
        band[:, e - BAND : e + BAND] = True
    for e in layout.y_edges[1:-1]:
        band[e - BAND : e + BAND, :] = True
    # the mosaic's own borders between photos (hard edges, hard to fit) are left out of both bands: where a block
    # border falls on one (y 3000 and 6000 here), its error is the photos', not the blend's
    photo = np.zeros((h, w), bool)
    for x in range(TILE[0], w, TILE[0]):
        photo[:, x - 2 * BAND : x + 2 * BAND] = True
    for y in range(TILE[1], h, TILE[1]):
        photo[y - 2 * BAND : y + 2 * BAND, :] = True
    se = {"all": 0.0, "band": 0.0, "rest": 0.0}
    n = {"all": 0, "band": 0, "rest": 0}
    tiff = mosaic.with_suffix(".tiled.tif")  # strips of a tiled TIFF: any order, no decode from the top
    if not tiff.exists():
        bigimage.to_tiled(str(mosaic), str(tiff))
    for y0, truth in bigimage.strips(str(tiff), STRIP):
        rows = truth.shape[0]
        _, png = svc.get(f"/v1/models/{name}/render", width=w, height=rows, viewport=f"0,{y0 / h},1,{(y0 + rows) / h}")
        got = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), np.float64)
        err = ((got - truth) / 255.0) ** 2
        mask, off = band[y0 : y0 + rows], photo[y0 : y0 + rows]
        for key, m in (("all", slice(None)), ("band", mask & ~off), ("rest", ~mask & ~off)):
            sel = err[m]
            se[key] += float(sel.sum())
            n[key] += sel.size
    return {f"psnr_{k}": psnr(se[k], n[k]) for k in se}


def tiles(svc: Service, name: str, layout: BlockLayout) -> dict:
    cold, warm = [], []
    for b in layout.blocks:  # the first tile in a block's core loads the block
        x, y = b.x + b.w // 2 - 256, b.y + b.h // 2 - 256
        cold.append(svc.get(f"/iiif/3/{name}/{x},{y},512,512/max/0/default.jpg")[0])
        for k in range(1, 4):  # neighbours in the same block: resident, not cached
            warm.append(svc.get(f"/iiif/3/{name}/{x + k * 64},{y},512,512/max/0/default.jpg")[0])
    return {
        "cold_ms_median": round(statistics.median(cold) * 1000),
        "cold_ms_max": round(max(cold) * 1000),
        "warm_ms_median": round(statistics.median(warm) * 1000),
        "warm_ms_p90": round(sorted(warm)[int(0.9 * len(warm))] * 1000),
        "cold": len(cold),
        "warm": len(warm),
    }


def browse(svc: Service, name: str) -> dict:
    info = svc.client.get(f"/iiif/3/{name}/info.json").json()
    w, h, tile = info["width"], info["height"], info["tiles"][0]["width"]
    levels = {}
    for sf in sorted(info["tiles"][0]["scaleFactors"], reverse=True):
        times, span = [], tile * sf
        for y in range(0, h, span):
            for x in range(0, w, span):
                rw, rh = min(span, w - x), min(span, h - y)
                size = f"{-(-rw // sf)},{-(-rh // sf)}"
                times.append(svc.get(f"/iiif/3/{name}/{x},{y},{rw},{rh}/{size}/0/default.jpg")[0])
        levels[sf] = {"tiles": len(times), "ms_median": round(statistics.median(times) * 1000)}
    return {"levels": levels, "peak_rss_mib": round(svc.peak_mib()), "end_rss_mib": round(svc.rss_mib())}


def one_model_tiles(svc: Service, name: str, width: int, height: int) -> dict:
    """Warm 512² tiles of a one-model fit (bench.giant's 4 MP reference), for comparison."""
    svc.get(f"/iiif/3/{name}/0,0,512,512/max/0/default.jpg")  # loads it
    times = [
        svc.get(f"/iiif/3/{name}/{x},{y},512,512/max/0/default.jpg")[0]
        for x in range(64, width - 512, 400)
        for y in range(64, height - 512, 400)
    ]
    return {"warm_ms_median": round(statistics.median(times) * 1000), "tiles": len(times)}


def serve(work: Path, budget: str, name: str) -> dict:
    import json

    meta = json.loads(sorted((work / "models" / name).glob("*/metadata.json"))[-1].read_text())
    layout = BlockLayout.from_metadata(meta["blocks"])
    out = {"model": name, "budget": budget, "grid": [layout.cols, layout.rows], "recorded": meta["metrics"]}
    svc = Service(work / "models", budget)
    try:
        out["tiles"] = tiles(svc, name, layout)
        out["one_model_4mp"] = one_model_tiles(svc, "ref4mp", 2400, 1728)
    finally:
        svc.stop()
    svc = Service(work / "models", budget)
    try:
        out["browse"] = browse(svc, name)
        print(json.dumps(out), flush=True)
        out["quality"] = quality(svc, name, work / "mosaic.png", layout)
        out["peak_rss_mib_after_quality"] = round(svc.peak_mib())
    finally:
        svc.stop()
    print(json.dumps(out), flush=True)
    return out
