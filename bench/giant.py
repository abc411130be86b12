"""Giant images (issue 38): a mosaic of real photos of 100+ MP fitted in blocks by `fit-image --block-size`, against
a 4 MP fit of the same mosaic on the same machine, then served under a memory budget.

    python -m bench.giant make  --photos DIR --out /tmp/giant            # mosaic.jpg, 12,000 × 9,000
    python -m bench.giant fit   --work /tmp/giant [--block 4096]         # the 4 MP fit, then the blocked fit
    python -m bench.giant serve --work /tmp/giant [--budget 2GiB]        # PSNR, seams, tiles, RSS
    python -m bench.giant block --work /tmp/giant [--sizes 2048 3072] [--repeats 5]   # the block size

Each fit runs in a subprocess (`python -m training fit-image`, the `grid` preset's options, every pixel), timed,
its peak RSS from the kernel (`ru_maxrss` of the child). Results: bench/results/giant.json (one key per step).

`block`: one block of each size, cut from the mosaic and fitted as a fit job's piece is (`fit_piece`, the `grid`
preset configured for the block's own pixels), each in a subprocess of its own: the fit's time, its PSNR, the export's
graph (the packed dense-grid graph, or the traced GridSample one above grid_export.MAX_PACKED) and its parity with
torch (the gate is 1e-5), the file's size; then onnxruntime's session load (median of `repeats`, as a cold tile pays
it) and a warm 512² tile at native size in the block's middle. Results: bench/results/giant_block.json.
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
from PIL import Image

from bench.common import RESULTS, ROOT, machine
from bench.giant_serve import TILE, serve
from fitstore import PRESETS

OUT = RESULTS / "giant.json"
BLOCK_OUT = RESULTS / "giant_block.json"
OVERLAP = 32  # a block's overlap on every side
ORIGIN = (4800, 3636)  # where `block` cuts: the 4 MP reference's corner, across a border between two photos
GRID = (5, 6)  # 12,000 × 9,000


def save(key: str, value: dict) -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[key] = {**value, "machine": machine()}
    OUT.write_text(json.dumps(data, indent=1) + "\n")


def make(photos: Path, out: Path) -> None:
    """A mosaic of native-resolution crops of the largest photos (no resampling), flipped and shifted for variety."""
    big = [p for p in sorted(photos.glob("*.jpg")) if min(Image.open(p).size) >= 1600]
    w, h = TILE
    mosaic = Image.new("RGB", (w * GRID[0], h * GRID[1]))
    for k in range(GRID[0] * GRID[1]):
        src = Image.open(big[k % len(big)]).convert("RGB")
        variant = k // len(big)
        x0 = (src.width - w) * (variant % 2)
        y0 = (src.height - h) * ((variant // 2) % 2)
        crop = src.crop((x0, y0, x0 + w, y0 + h))
        if variant % 3 == 1:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        mosaic.paste(crop, ((k % GRID[0]) * w, (k // GRID[0]) * h))
    out.mkdir(parents=True, exist_ok=True)
    mosaic.save(out / "mosaic.png", compress_level=1)
    mosaic.crop((4800, 3636, 4800 + 2400, 3636 + 1728)).save(out / "ref4mp.png")  # 4.1 MP across a photo border
    save("make", {"photos": [p.name for p in big], "size": list(mosaic.size), "tile": list(TILE)})


def fit_once(image: Path, out: Path, extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "training", "fit-image", "--image", str(image), "--out", str(out)]
    argv += [*PRESETS["grid"]["argv"], "--steps", str(PRESETS["grid"]["steps"]), "--protocol", "full"]
    argv += ["--no-progress", *extra]
    # a fresh parent per fit, so that its children's peak RSS is this fit's alone
    runner = "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]); " + (
        "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
    )
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", runner, *argv], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"fit failed: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    peak = int(lines[-1].split()[1])
    metrics = json.loads(lines[-2].split(" -> ")[0])
    w, h = Image.open(image).size
    return {
        "pixels": w * h,
        "seconds": round(seconds, 1),
        "s_per_mp": round(seconds / (w * h / 1e6), 2),
        "peak_rss_mib": round(peak / 1024),
        "metrics": metrics,
        "command": " ".join(argv[1:]),
    }


def fit(work: Path, block: int, ref: bool) -> None:
    """The 4 MP fit (unless `ref` is False: the last one recorded stands), then the blocked fit."""
    if ref:
        save("fit_ref_4mp", fit_once(work / "ref4mp.png", work / "models" / "ref4mp", []))
    reference = json.loads(OUT.read_text())["fit_ref_4mp"]
    giant = fit_once(work / "mosaic.png", work / "models" / f"giant{block}", ["--block-size", str(block)])
    print(json.dumps({"giant": giant}), flush=True)
    save(f"fit_block_{block}", {**giant, "ratio_s_per_mp_to_4mp": round(giant["s_per_mp"] / reference["s_per_mp"], 3)})


def one_block(work: Path, block: int, repeats: int) -> dict:
    """Fit, export and load one block of `block` px (plus the overlap on every side): run in its own process."""
    import onnxruntime as ort

    from commandline import OneLineParser
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


def block_sizes(work: Path, sizes: list[int], repeats: int) -> None:
    """One block of each size, each fitted in a subprocess of its own (its peak RSS is the kernel's for it)."""
    rows = []
    for size in sizes:
        cmd = [sys.executable, "-m", "bench.giant", "block", "--work", str(work), "--one", str(size)]
        done = subprocess.run([*cmd, "--repeats", str(repeats)], cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            rows.append({"block": size, "error": (done.stderr.strip().splitlines() or ["?"])[-1]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        sys.stderr.write(json.dumps(rows[-1]) + "\n")
    BLOCK_OUT.write_text(json.dumps({"rows": rows, "machine": machine()}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.giant")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--photos", type=Path, required=True)
    m.add_argument("--out", type=Path, default=Path("/tmp/giant"))
    f = sub.add_parser("fit")
    f.add_argument("--work", type=Path, default=Path("/tmp/giant"))
    f.add_argument("--block", type=int, default=4096)
    f.add_argument("--no-ref", dest="ref", action="store_false", help="keep the 4 MP fit already recorded")
    s = sub.add_parser("serve")
    s.add_argument("--work", type=Path, default=Path("/tmp/giant"))
    s.add_argument("--budget", default="2GiB")
    s.add_argument("--model", default="giant4096", help="the blocked model under WORK/models")
    b = sub.add_parser("block")
    b.add_argument("--work", type=Path, default=Path("/tmp/giant"), help="make's folder (mosaic.tiled.tif)")
    b.add_argument("--sizes", type=int, nargs="+", default=[2048, 3072])
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: one size
    a = p.parse_args(argv)
    if a.cmd == "make":
        make(a.photos, a.out)
    elif a.cmd == "fit":
        fit(a.work, a.block, a.ref)
    elif a.cmd == "block" and a.one:
        sys.stdout.write(json.dumps(one_block(a.work, a.one, a.repeats)) + "\n")
    elif a.cmd == "block":
        block_sizes(a.work, a.sizes, a.repeats)
    else:
        save(f"serve_{a.model}_{a.budget}", serve(a.work, a.budget, a.model))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
