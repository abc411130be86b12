"""The block size of a giant's fit (issue 38, docs/benchmarks.md "giant"): one block of each size, cut from the 108 MP
mosaic (bench/giant.py make) and fitted as a fit job's piece is (`fit_piece`, the `grid` preset configured for the
block's own pixels), side by side in one run.

    python -m bench.giant_block --work /tmp/giant [--sizes 2048 3072] [--repeats 5]

Per size, in a subprocess of its own (its peak RSS is the kernel's `ru_maxrss` for it): the fit's time, its PSNR,
the export's graph (the packed dense-grid graph, or the traced GridSample one above grid_export.MAX_PACKED) and its
parity with torch (the gate is 1e-5), the file's size; then onnxruntime's session load (median of `repeats`, as a
cold tile pays it) and a warm 512² tile at native size in the block's middle (its 262,144 pixel centres, median of
`repeats`). Results:
bench/results/giant_block.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, ROOT, machine

OUT = RESULTS / "giant_block.json"
OVERLAP = 32
ORIGIN = (4800, 3636)  # the 4 MP reference's corner in bench/giant.py: across a border between two photos


def one(work: Path, block: int, repeats: int) -> dict:
    """Fit, export and load one block of `block` px (plus the overlap on every side): run in its own process."""
    import onnxruntime as ort

    from commandline import OneLineParser
    from fitstore import PRESETS
    from modelrepo.blocks import BlockLayout
    from training.blocks import fit_piece
    from training.cli_image import add_image_options, fit_config
    from training.encodings.grid_export import plan
    from training.image_models import ImageINR
    from training.regions import read_region

    side = block + 2 * OVERLAP
    img = read_region(work / "mosaic.tiled.tif", ORIGIN[0], ORIGIN[1], side, side)
    parser = OneLineParser(prog="bench")
    add_image_options(parser)
    grid = PRESETS["grid"]
    argv = ["--image", "astronaut", "--no-progress", "--protocol", "full", "--steps", str(grid["steps"])]
    args = parser.parse_args([*argv, *grid["argv"]])  # as a fit job's piece: every pixel, the preset's steps
    cfg = fit_config(args, dims=(side, side))
    layout = BlockLayout.plan(side, side, side, 0)  # one block: the piece is this crop
    t0 = time.perf_counter()
    piece = fit_piece(cfg, layout, layout.blocks[0].file, img)
    fit_s = time.perf_counter() - t0
    dense = plan(ImageINR(cfg.model), "coords") is not None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    loads, tiles = [], []
    # a 512² tile at native size in the middle of the block: its pixel centres, in the block's [0, 1]²
    ys, xs = np.mgrid[0:512, 0:512].astype(np.float32) + 0.5 + (side - 512) // 2
    coords = np.stack([xs.ravel(), ys.ravel()], 1) / np.float32(side)
    for _ in range(repeats):
        t = time.perf_counter()
        sess = ort.InferenceSession(piece.onnx, sess_options=opts, providers=["CPUExecutionProvider"])
        loads.append(time.perf_counter() - t)
    sess.run(None, {"coords": coords})
    for _ in range(repeats):
        t = time.perf_counter()
        sess.run(None, {"coords": coords})
        tiles.append(time.perf_counter() - t)
    return {
        "block": block,
        "pixels": side * side,
        "fit_s": round(fit_s, 1),
        "s_per_mp": round(fit_s / (side * side / 1e6), 2),
        "psnr": round(piece.metrics.get("full_psnr", piece.metrics.get("train_psnr")), 2),
        "graph": "dense (packed corners)" if dense else "traced (GridSample)",
        "parity": piece.export.get("max_abs_diff_vs_torch"),
        "file_mb": round(len(piece.onnx) / 1e6, 1),
        "load_ms_median": round(1000 * statistics.median(loads), 1),
        "tile_512_ms_median": round(1000 * statistics.median(tiles), 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="bench/giant.py make's folder (mosaic.tiled.tif)")
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 3072])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: one size
    args = p.parse_args(argv)
    if args.one:
        sys.stdout.write(json.dumps(one(args.work, args.one, args.repeats)) + "\n")
        return 0
    rows = []
    for size in args.sizes:
        cmd = [sys.executable, "-m", "bench.giant_block", "--work", str(args.work), "--one", str(size)]
        done = subprocess.run([*cmd, "--repeats", str(args.repeats)], cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            rows.append({"block": size, "error": (done.stderr.strip().splitlines() or ["?"])[-1]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        sys.stderr.write(json.dumps(rows[-1]) + "\n")
    OUT.write_text(json.dumps({"rows": rows, "machine": machine()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
