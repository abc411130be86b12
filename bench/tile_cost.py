"""Where the CPU of one uncached 512² IIIF tile of a grid model goes (docs/benchmarks.md, classic): in process,
this thread's CPU time (time.thread_time, so other processes on a shared machine count little), medians of rounds
in which the parts take turns.

- plain: the whole graph per sample on the service's tiles (`INR_RENDER_TILE_SAMPLES`), split by onnxruntime's
  profiler into operator types (the packed corners' Gather, the weights' Gemm and Mul, the head's Gemm, …);
- lattice without the kernel: the levels interpolated per column and row (numpy) and the head per pixel
  (onnxruntime), on the lattice's tiles (service/render/lattice.py), as a service built without a C compiler renders;
- the lattice kernel (service/engine/_latticekernel.c): the same arithmetic in one pass, rgb or, as the service
  renders a tile without supersamples or background, its pixels written into the image, on the kernel's tiles;
- the pixels (clip, scale, round: `render_tile`) and the JPEG encoding (Pillow, quality 90: its defaults against
  `optimize` and 4:4:4), the same for both paths.

    python -m bench.tile_cost --model models/NAME --rounds 7
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

from modelrepo import read_spec
from service.engine.runtime import RuntimeOptions
from service.engine.sessions import session_options
from service.engine.tasks import runtime_for
from service.render.imaging import RenderSpec, encode, new_image, render_tile, tile_points
from service.render.lattice import KERNEL_TILE_FACTOR, LATTICE_TILE_FACTOR, lattice_painter, lattice_sampler, model_axes
from service.render.tiling import tiles

from .common import RESULTS, log, machine, median, setup_logging, write_json

TILE_SAMPLES = 8192  # INR_RENDER_TILE_SAMPLES' default


def cpu_ms(parts: dict, rounds: int) -> dict[str, float]:
    """Each part's median of `rounds`, the parts taking turns round by round (a shared machine's load changes)."""
    for fn in parts.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(rounds):
        for name, fn in parts.items():
            t = time.thread_time()
            fn()
            times[name].append((time.thread_time() - t) * 1000)
    return {name: median(ms) for name, ms in times.items()}


def op_shares(onnx_path: Path, spec: RenderSpec) -> dict[str, float]:
    """Share of each operator type in onnxruntime's own profile of the plain graph on the tile's samples."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        opts = session_options(1, False)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(d) / "p")
        s = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        for t in tiles(spec.height, spec.width, 1, TILE_SAMPLES):
            s.run(["rgb"], {"coords": tile_points(spec, t)})
        events = json.loads(Path(s.end_profiling()).read_text())
    by_op: Counter = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values()) or 1
    return {op: round(us / total, 3) for op, us in by_op.most_common()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.tile_cost", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a grid model folder (its version 1)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--at", default="512,512", help="the tile's top-left corner in image pixels (scale 1)")
    p.add_argument("--out-dir", default=str(RESULTS))
    p.add_argument("--name", default="tile_cost")
    a = p.parse_args(argv)
    rt = runtime_for(a.model, read_spec(a.model), 1, RuntimeOptions())
    if not rt.load():
        p.error(f"{a.model}: {rt.error}")
    if rt.lattice is None:
        p.error(f"{a.model} has no lattice (not a dense grid model)")
    w, h = rt.image_size
    x0, y0 = (int(v) for v in a.at.split(","))
    spec = RenderSpec(512, 512, np.eye(3)[:2], viewport=(x0 / w, y0 / h, (x0 + 512) / w, (y0 + 512) / h))
    plain_tiles = list(tiles(512, 512, 1, TILE_SAMPLES))
    lattice_tiles = list(tiles(512, 512, 1, TILE_SAMPLES * LATTICE_TILE_FACTOR))
    kernel_tiles = list(tiles(512, 512, 1, TILE_SAMPLES * KERNEL_TILE_FACTOR))
    points = [tile_points(spec, t) for t in plain_tiles]
    lat = rt.lattice
    numpy_lattice = dataclasses.replace(lat, kernel=None)  # numpy's and onnxruntime's road
    features = [lat.axes(*model_axes(spec, t)) for t in lattice_tiles]
    feats = [lat.grid_features(f) for f in features]
    out = new_image(spec)
    rgbs = [rt.render_rgb(x) for x in points]
    for t, r in zip(plain_tiles, rgbs):
        render_tile(spec, t, r.copy(), out)
    img = Image.fromarray(out)

    def without_kernel() -> None:
        rt.lattice = numpy_lattice
        try:
            sample = lattice_sampler(rt, spec)
            for t in lattice_tiles:
                render_tile(spec, t, sample(t), out)
        finally:
            rt.lattice = lat

    def kernel_rgb() -> None:
        sample = lattice_sampler(rt, spec)
        for t in kernel_tiles:
            render_tile(spec, t, sample(t), out)

    def kernel_pixels() -> None:
        paint = lattice_painter(rt, spec, out)
        for t in kernel_tiles:
            paint(t)

    def jpeg(**kw):
        def save() -> int:
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90, **kw)
            return len(buf.getvalue())

        return save

    parts = {
        "plain: the whole graph": lambda: [rt.render_rgb(x) for x in points],
        "plain: samples → pixels": lambda: [render_tile(spec, t, r.copy(), out) for t, r in zip(plain_tiles, rgbs)],
        "plain: all but the encoding": lambda: [
            render_tile(spec, t, rt.render_rgb(tile_points(spec, t)), out) for t in plain_tiles
        ],
        "lattice without the kernel: features (numpy)": lambda: [lat.grid_features(f) for f in features],
        "lattice without the kernel: head (onnxruntime)": lambda: [lat.run(f) for f in feats],
        "lattice without the kernel: all but the encoding": without_kernel,
    }
    if lat.kernel is not None:
        parts["lattice kernel: rgb, then samples → pixels"] = kernel_rgb
        parts["lattice kernel: pixels (the service's road)"] = kernel_pixels
    parts |= {
        "JPEG q90 (Pillow's defaults: 4:2:0, no optimize)": lambda: encode(out, "jpeg", 90),
        "JPEG q90 optimize": jpeg(optimize=True),
        "JPEG q90 4:4:4": jpeg(subsampling=0),
    }
    sizes = {
        "defaults": len(encode(out, "jpeg", 90)),
        "optimize": jpeg(optimize=True)(),
        "4:4:4": jpeg(subsampling=0)(),
    }
    result = {"machine": machine(), "model": str(a.model), "size": [w, h], "tile": [x0, y0, 512, 512]}
    result["cpu_ms"] = {name: round(ms, 2) for name, ms in cpu_ms(parts, a.rounds).items()}
    result["jpeg_bytes"] = sizes
    result["plain_op_shares"] = op_shares(rt.version_dir / "model.onnx", spec)
    write_json(a.name, result, Path(a.out_dir))
    for name, ms in result["cpu_ms"].items():
        log.info("%-50s %7.2f ms", name, ms)
    log.info("plain graph by operator: %s", result["plain_op_shares"])
    return result


if __name__ == "__main__":
    setup_logging()
    main()
