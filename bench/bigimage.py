"""Giant images through bigimage (issue 38): peak RSS and time of each reader, per format, each in a fresh process.

A real photo (data/photos/dandelion.jpg, 1920×1080) repeated into a ~`--megapixels` MP picture and written into
`--out` (never into the repository) as baseline JPEG, progressive JPEG, PNG, tiled BigTIFF and pyramidal tiled
BigTIFF; then, for each file: probe; read_region of a 2048² block at the centre; read_scaled to 2048; one pass of
strips(2048) over the whole image; and, for contrast, the same block through Pillow (Image.open, crop), which
decodes the whole image first. From the JPEG, to_tiled (one pass to a tiled pyramidal BigTIFF) is timed too.
Each measurement is a child process: its peak RSS (VmHWM) is that operation's, next to the RSS the child had
after its imports (the same for every row). Files are read from the page cache after the first round.

    python -m bench.bigimage --out /tmp/bigimg            # bench/results/bigimage.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import ROOT, machine, write_json

BLOCK = 2048
FILES = {  # name: (file, the pyvips save options)
    "JPEG": ("big.jpg", {"Q": 90}),
    "JPEG progressive": ("big-progressive.jpg", {"Q": 90, "interlace": True}),
    "PNG": ("big.png", {"compression": 6}),
    "BigTIFF tiled": ("big-tiled.tif", {"tile": True, "tile_width": 512, "tile_height": 512, "bigtiff": True}),
    "TIFF pyramid": (
        "big-pyramid.tif",
        {"tile": True, "tile_width": 512, "tile_height": 512, "pyramid": True, "bigtiff": True},
    ),
}
OPS = ("probe", "region", "scaled", "strips", "pillow_region")


def make_images(out: Path, source: Path, megapixels: float) -> dict[str, Path]:
    """The source repeated in a grid of about `megapixels` MP, saved once per format (kept when already there)."""
    import pyvips

    photo = pyvips.Image.new_from_file(str(source))
    n = max(1, round(math.sqrt(megapixels * 1e6 / (photo.width * photo.height))))
    big = pyvips.Image.arrayjoin([variant(photo, i) for i in range(n * n)], across=n)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for label, (file, options) in FILES.items():
        path = out / file
        if not path.exists():
            tiff = file.endswith(".tif")
            big.tiffsave(
                str(path), compression="deflate", predictor="horizontal", **options
            ) if tiff else big.write_to_file(str(path), **options)
        paths[label] = path
    return paths


def variant(photo, i: int):
    """The i-th copy of the photo, flipped and with its own gain: no two copies the same bytes, so that PNG's and
    deflate's back-references find no repeats a copy away, as they would not in a real photo of that size."""
    if i % 2:
        photo = photo.fliphor()
    if i // 2 % 2:
        photo = photo.flipver()
    return (photo * (0.8 + 0.4 * (i * 37 % 49) / 48)).cast("uchar")


def peak_rss_kib() -> int:
    """This process's peak resident set: VmHWM, which starts afresh at exec (ru_maxrss would carry the parent's
    peak into the child: Linux keeps it across execve)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(op: str, path: str) -> dict:
    """One operation in this process: seconds, peak RSS, and the RSS after the imports."""
    import numpy as np

    import bigimage

    before = peak_rss_kib()
    t0 = time.perf_counter()
    if op == "probe":
        h = bigimage.probe(path)
        what = f"{h.width}×{h.height}, {len(h.levels)} level(s)"
    elif op in ("region", "pillow_region"):
        h = bigimage.probe(path)
        w, hh = min(BLOCK, h.width), min(BLOCK, h.height)
        x, y = (h.width - w) // 2, (h.height - hh) // 2
        if op == "region":
            a = bigimage.read_region(path, x, y, w, hh)
        else:
            from PIL import Image

            Image.MAX_IMAGE_PIXELS = None
            with Image.open(path) as im:
                a = np.asarray(im.convert("RGB").crop((x, y, x + w, y + hh)))
        what = f"{a.shape[1]}×{a.shape[0]} mean {a.mean():.2f}"
    elif op == "scaled":
        a = bigimage.read_scaled(path, BLOCK)
        what = f"{a.shape[1]}×{a.shape[0]}"
    elif op == "strips":
        total = sum(s.sum(dtype=np.uint64) for _, s in bigimage.strips(path, BLOCK))
        h = bigimage.probe(path)
        what = f"mean {int(total) / (h.pixels * 3):.2f}"
    elif op == "to_tiled":
        h = bigimage.to_tiled(path, f"{path}.tiled.tif")
        what = f"{os.path.getsize(f'{path}.tiled.tif') / 2**20:.0f} MiB, {len(h.levels)} levels"
        os.remove(f"{path}.tiled.tif")
    else:
        raise ValueError(op)
    seconds = time.perf_counter() - t0
    peak = peak_rss_kib()
    return {"seconds": seconds, "peak_rss_mib": peak / 1024, "import_rss_mib": before / 1024, "what": what}


def child(op: str, path: Path) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "bench.bigimage", "--measure", op, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    if run.returncode:
        return {"error": (run.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def run(out: Path, source: Path, megapixels: float, rounds: int, ops: tuple[str, ...]) -> dict:
    import pyvips

    paths = make_images(out, source, megapixels)
    rows = []
    jobs = [(label, op, path) for label, path in paths.items() for op in ops]
    if "to_tiled" not in ops:
        jobs.append(("JPEG", "to_tiled", paths["JPEG"]))
    for label, op, path in jobs:
        samples = [child(op, path) for _ in range(rounds)]
        good = [s for s in samples if "error" not in s]
        row = {"format": label, "op": op, "file": path.name, "bytes": path.stat().st_size}
        if good:
            row.update(
                seconds=statistics.median(s["seconds"] for s in good),
                peak_rss_mib=max(s["peak_rss_mib"] for s in good),
                import_rss_mib=statistics.median(s["import_rss_mib"] for s in good),
                what=good[0]["what"],
            )
        else:
            row["error"] = samples[0]["error"]
        rows.append(row)
    return {
        "machine": {**machine(), "libvips": ".".join(str(pyvips.version(i)) for i in range(3))},
        "megapixels": megapixels,
        "rounds": rounds,
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = ["| format | operation | time | peak RSS (after imports) | result |", "|---|---|---:|---:|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['format']} | {r['op']} | | | error: {r['error']} |")
        else:
            lines.append(
                f"| {r['format']} | {r['op']} | {r['seconds']:.3f} s | {r['peak_rss_mib']:.0f} MiB "
                f"({r['import_rss_mib']:.0f}) | {r['what']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bigimage", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for the test images (not in the repository)")
    p.add_argument("--source", type=Path, default=ROOT / "data" / "photos" / "dandelion.jpg")
    p.add_argument("--megapixels", type=float, default=100.0)
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per measurement (median time, max RSS)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}, to_tiled")
    p.add_argument("--name", default="bigimage", help="bench/results/NAME.json")
    p.add_argument("--results-dir", type=Path, default=None)
    p.add_argument("--measure", nargs=2, metavar=("OP", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return 0
    if args.out is None:
        p.error("--out is required")
    if args.out.resolve().is_relative_to(ROOT):
        p.error("--out must be outside the repository (the images are hundreds of MB)")
    result = run(args.out, args.source, args.megapixels, args.rounds, tuple(args.ops.split(",")))
    write_json(args.name, result, args.results_dir)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
