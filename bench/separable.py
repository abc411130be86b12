"""Separable renders against the plain ones, and against the GEMM-only rate (docs/benchmarks.md, separable).

Three variants of the bundled `astronaut` model, side by side in one run, rounds alternating:
  - `before`: the model as shipped before (its old ONNX from git, with the Concat), plain path;
  - `plain`: today's Concat-free graph, rendered the plain way (the `separable` entry removed);
  - `separable`: today's folder: sines per tile row and column, body graph per pixel.
Measured:
  - GET /render at SIZE² (PNG) through the real service, render cache off;
  - in process, the render path without HTTP or PNG (tiles → model → pixels) and, for the
    separable one, its parts (features, body graph);
  - the GEMM-only time of the same shapes (the body's MatMul/Gemm, torch.mm on preallocated
    outputs, one tile at a time): the roofline of bench/roofline.py for this render.
Also: the separable render's max abs difference from the plain graph and from float64.

    OMP_NUM_THREADS=1 python -m bench.separable          # 1024², 1 thread, 5 rounds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from .common import ROOT, machine, median, ort_session, setup_logging, write_json
from .roofline import gemm_shapes
from .serving import Server

log = logging.getLogger("bench.separable")
BEFORE_REV = "557bd02"  # the last commit with the Concat graph of models/astronaut


def make_repo(tmp: Path) -> Path:
    repo = tmp / "models"
    src = ROOT / "models" / "astronaut"
    for name in ("separable", "plain", "before"):
        shutil.copytree(src, repo / name)
        for f in ("config.pbtxt", "metadata.json"):  # the contract: names match the folder
            path = repo / name / f
            path.write_text(path.read_text().replace('"astronaut"', f'"{name}"', 1))
    for name in ("plain", "before"):
        vmeta = repo / name / "1" / "metadata.json"
        meta = json.loads(vmeta.read_text())
        meta.pop("separable")
        (repo / name / "1" / "body.onnx").unlink()
        if name == "before":  # the ONNX graph as shipped before, same weights
            old = subprocess.run(
                ["git", "show", f"{BEFORE_REV}:models/astronaut/1/model.onnx"],
                cwd=ROOT,
                capture_output=True,
                check=True,
            ).stdout
            (repo / name / "1" / "model.onnx").write_bytes(old)
            meta["onnx_sha256"] = hashlib.sha256(old).hexdigest()
        vmeta.write_text(json.dumps(meta))
    return repo


def in_process(repo: Path, size: int, tile: int, threads: int, rounds: int) -> dict:
    """Seconds per SIZE² render (no HTTP, no PNG) per variant, and the separable render's parts."""
    import torch

    from modelrepo import read_spec
    from service.api.schemas import RenderRequest, sampling_matrix
    from service.engine.runtime import RuntimeOptions
    from service.engine.tasks import runtime_for
    from service.geometry.sampling import Background
    from service.render.imaging import RenderSpec, render
    from service.render.separable import GridFeatures, separable_sampler
    from service.render.tiling import grid_axes, tiles

    torch.set_num_threads(threads)
    models = {}
    for name in ("before", "plain", "separable"):
        m = runtime_for(repo / name, read_spec(repo / name), 1, RuntimeOptions(threads=threads))
        assert m.load(), m.error
        models[name] = m
    sep = models["separable"].separable

    def spec(transform: dict, k: int = 1) -> RenderSpec:
        req = RenderRequest.model_validate({"width": size, "height": size, "transform": transform})
        return RenderSpec(size, size, sampling_matrix(req.transform), (0, 0, 1, 1), k, Background("extrapolate"))

    s = spec({})
    tl = list(tiles(size, size, 1, tile))
    body = ort_session(repo / "separable" / "1" / "body.onnx", threads)
    grid = GridFeatures(sep.stage, s.matrix)
    feats = [grid.tile(*grid_axes(t, size, size, 1, s.viewport), (t.y0, t.y1)) for t in tl[:8]]  # 8 MB each
    shapes, _ = gemm_shapes(repo / "separable" / "1" / "body.onnx")
    ws = [torch.randn(k, n) for k, n in shapes]
    outs = [torch.empty(tile, n) for _, n in shapes]
    x0 = torch.randn(tile, shapes[0][0])

    def gemm_only():
        for _ in tl:
            x = x0
            for w, o in zip(ws, outs):
                torch.mm(x, w, out=o)
                x = o

    kernels = {
        "before": lambda: render(lambda x: models["before"].predict(x)["rgb"], s, tile),
        "plain": lambda: render(lambda x: models["plain"].predict(x)["rgb"], s, tile),
        "separable": lambda: render(None, s, tile, sampler=separable_sampler(sep, s)),
        "separable: features only": lambda: [
            grid.tile(*grid_axes(t, size, size, 1, s.viewport), (t.y0, t.y1)).shape for t in tl
        ],
        "separable: body graph only": lambda: [
            body.run(["rgb"], {"features": feats[i % 8]})[0].shape for i in range(len(tl))
        ],
        "GEMMs only (torch.mm)": gemm_only,
    }
    times: dict[str, list[float]] = {k: [] for k in kernels}
    for _ in range(rounds):
        for name, fn in kernels.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    from training.reexport import load_from_onnx

    exact = load_from_onnx(repo / "before")[0].double()  # the same weights; its graph still has encoding.B
    parity = {}
    for label, transform, k in VIEWS:
        parity[label] = _parity(sep, models["plain"], exact, spec(transform, k), tile)
        log.info("bundled model %s: %s", label, parity[label])
    return {
        "seconds": times,
        "medians": {k: median(v) for k, v in times.items()},
        "parity": parity,
        "gemm_shapes": shapes,
    }


VIEWS = (
    ("identity", {}, 1),
    ("rotate 33 scale 0.7 k=2", {"rotate": 33, "scale": 0.7}, 2),
    ("rotate -120 scale 3", {"rotate": -120, "scale": 3.0, "translate": [0.2, 0.1]}, 1),
)


def _parity(sep, plain_model, exact, sp, tile: int) -> dict:
    """Max abs differences of the separable render, the plain graph and the float64 torch network."""
    import torch

    from service.geometry.transform import apply
    from service.render.imaging import plain_sampler
    from service.render.separable import separable_sampler
    from service.render.tiling import sample_coords, tiles

    a = _rgb(separable_sampler(sep, sp), sp, tile)
    b = _rgb(plain_sampler(lambda x: plain_model.predict(x)["rgb"], sp), sp, tile)
    ref = []
    for t in tiles(sp.height, sp.width, sp.supersample, tile):
        x = apply(sp.matrix, sample_coords(t, sp.width, sp.height, sp.supersample, sp.viewport)).reshape(-1, 2)
        with torch.no_grad():
            ref.append(exact(torch.from_numpy(x)).numpy().reshape(-1))
    ref = np.concatenate(ref)
    return {
        "separable_vs_plain": float(np.abs(a - b).max()),
        "separable_vs_float64": float(np.abs(a - ref).max()),
        "plain_vs_float64": float(np.abs(b - ref).max()),
    }


def _rgb(sample, spec, tile: int) -> np.ndarray:
    from service.render.tiling import tiles

    return np.concatenate([sample(t).reshape(-1) for t in tiles(spec.height, spec.width, spec.supersample, tile)])


def parity_random(sigma: float, size: int, tile: int) -> dict:
    """Max abs difference, separable vs the plain graph and vs float64 torch, for a random-weight
    Gaussian model of σ `sigma` (the fit-image architecture of models/astronaut) at SIZE² renders."""
    import torch

    from modelrepo import read_spec
    from service.api.schemas import RenderRequest, sampling_matrix
    from service.engine.runtime import RuntimeOptions
    from service.engine.tasks import runtime_for
    from service.geometry.sampling import Background
    from service.render.imaging import RenderSpec
    from training.encodings import EncodingConfig
    from training.fit_image import FitConfig, export_image_model
    from training.image_models import ImageINR, ImageModelConfig

    torch.manual_seed(0)
    cfg = ImageModelConfig(width=128, depth=4, encoding=EncodingConfig("gaussian", scale=sigma, features=128))
    net = ImageINR(cfg).eval()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        export_image_model(
            net, FitConfig(model=cfg), Path(tmp) / "m", {"kind": "bench"}, {}, {}, np.zeros((2, 2, 3), np.float32)
        )
        m = runtime_for(Path(tmp) / "m", read_spec(Path(tmp) / "m"), 1, RuntimeOptions(threads=1))
        assert m.load(), m.error
        exact = net.double()
        for label, transform, k in VIEWS:
            req = RenderRequest.model_validate({"width": size, "height": size, "transform": transform})
            sp = RenderSpec(size, size, sampling_matrix(req.transform), (0, 0, 1, 1), k, Background("extrapolate"))
            out[label] = _parity(m.separable, m, exact, sp, tile)
            log.info("σ=%g %s: %s", sigma, label, out[label])
    return out


def over_http(repo: Path, size: int, threads: int, rounds: int) -> dict:
    env = {
        "INR_RENDER_CACHE_BYTES": "0",
        "INR_THREADS": str(threads),
        "INR_RENDER_WORKERS": "1",
        "INR_RENDER_TIMEOUT_S": "3600",
    }
    srv = Server(repo, "separable-bench", env).wait()
    times: dict[str, list[float]] = {n: [] for n in ("before", "plain", "separable")}
    try:
        with httpx.Client(base_url=srv.url, timeout=600) as c:
            for r in range(rounds + 1):
                for name in times:
                    t0 = time.perf_counter()
                    c.get(f"/v1/models/{name}/render", params={"width": size, "height": size}).raise_for_status()
                    if r:  # round 0 warms up
                        times[name].append(time.perf_counter() - t0)
    finally:
        srv.stop()
    return {"seconds": times, "medians": {k: median(v) for k, v in times.items()}}


def cache_http(repo: Path, size: int, threads: int, rounds: int) -> dict:
    """The render cache on: a SIZE² render's first answer (miss), repeats (hits) and revalidations (304)."""
    srv = Server(repo, "cache-bench", {"INR_THREADS": str(threads), "INR_RENDER_TIMEOUT_S": "3600"}).wait()
    url, params = "/v1/models/separable/render", {"width": size, "height": size}
    out: dict[str, list[float]] = {"miss": [], "hit": [], "304": []}
    try:
        with httpx.Client(base_url=srv.url, timeout=600) as c:
            etag = None  # the "hit" before each "304" sets it
            for r in range(rounds):
                p = {**params, "rotate": r}
                for kind in ("miss", "hit", "304"):
                    headers = {"If-None-Match": etag} if kind == "304" else {}
                    t0 = time.perf_counter()
                    resp = c.get(url, params=p, headers=headers)
                    out[kind].append(time.perf_counter() - t0)
                    etag = resp.headers["etag"]
                    assert resp.status_code == (304 if kind == "304" else 200)
            metrics = c.get("/metrics").text
    finally:
        srv.stop()
    counts = {
        line.split("{")[0]: line.rsplit(" ", 1)[1]
        for line in metrics.splitlines()
        if line.startswith("nv_cache_num_") and 'model="separable"' in line
    }
    return {"seconds": out, "medians": {k: median(v) for k, v in out.items()}, "metrics": counts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--tile", type=int, default=8192)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--name", default="separable")
    p.add_argument("--parts", default="in_process,http", help="of in_process, http, cache")
    p.add_argument(
        "--parity-sigma", type=float, default=0.0, help="only the parity of a random-weight model of this σ (no timing)"
    )
    args = p.parse_args(argv)
    setup_logging()
    if args.parity_sigma:
        write_json(
            args.name,
            {
                "machine": machine(),
                "args": vars(args),
                "parity": parity_random(args.parity_sigma, args.size, args.tile),
            },
        )
        return 0
    parts = {
        "in_process": lambda repo: in_process(repo, args.size, args.tile, args.threads, args.rounds),
        "http": lambda repo: over_http(repo, args.size, args.threads, args.rounds),
        "cache": lambda repo: cache_http(repo, args.size, args.threads, args.rounds),
    }
    chosen = args.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp))
        result = {"machine": machine(), "args": vars(args), **{k: parts[k](repo) for k in chosen}}
    for part in chosen:
        for k, v in result[part]["medians"].items():
            log.info("%s %s: %.3f s", part, k, v)
    write_json(args.name, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
