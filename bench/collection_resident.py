"""A model's resident memory and first cold tile, this tree beside other checkouts (docs/benchmarks.md, collection):
each side serves the same photos fitted by its own default fit (`fit-image` with the grid preset of its own
fitstore.PRESETS; a baseline with no fits of its own serves this tree's), and the bundled photo model of its own
models/.

    git worktree add --detach /tmp/base REV
    python -m bench.collection_resident fit --baseline /tmp/base --photos a.jpg,b.png --out /tmp/fits
    python -m bench.collection_resident run --baseline /tmp/base --fits /tmp/fits --bundled dandelion --copies 6
    python -m bench.collection_resident run --baseline /tmp/base --baseline /tmp/before --fits /tmp/fits

`run`: per photo and round, each side in turn (the order alternates round by round) starts its own server on COPIES
copies of its model (hard links, distinct names: distinct versions in memory), the render cache off and an empty
session cache of its own, and asks each copy's first 512² IIIF tile, one after another: the first copy's is the
first load ever (the graph decoded and optimised, the session cache written), the others' a load from the filled
session cache. It reports the server's resident set idle, after one model and after COPIES; the peak during the
loads (VmHWM, which each load starts again); the residency's own count (`inr_model_resident_bytes`) against the
growth of the resident set; the first tile's time with the cache empty and the median with it filled. Medians over
the rounds, and this tree's over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .collection import copy_model, emit, medians, metric, rss_of
from .procs import status_kib
from .serving import ROOT, Server

MIB = 2**20


def hwm_of(pid: int) -> int:
    """The peak resident set of `pid` since its last reset (a model load resets it: service/engine/measure.py)."""
    return status_kib(pid, "VmHWM") * 1024


def fit(args) -> dict:
    """Each side's default fit of each photo: its own fit-image, with its own grid preset, into OUT/SIDE/PHOTO."""
    out = {}
    for photo in args.photos:
        for side, tree in (("this", ROOT), ("base", args.baseline)):
            folder = args.out / side / photo.stem.lower()
            if (folder / "1" / "metadata.json").is_file():
                continue
            preset = subprocess.run(
                [sys.executable, "-c", "import json; from fitstore import PRESETS; print(json.dumps(PRESETS['grid']))"],
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            )
            grid = json.loads(preset.stdout)
            cmd = [sys.executable, "-m", "training", "fit-image", "--image", str(photo), *grid["argv"]]
            cmd += ["--protocol", "full", "--steps", str(grid["steps"]), "--no-progress", "--out", str(folder)]
            start = time.monotonic()
            subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL)
            out[f"{side}/{folder.name}"] = round(time.monotonic() - start, 1)
    return {"fit_s": out}


def collections(args, trees: dict[str, Path], work: Path) -> dict[str, dict[str, Path]]:
    """photo → side → a folder of COPIES copies of that side's model of it: the side's own fit (FITS/SIDE/NAME, else
    FITS/this/NAME: a baseline whose fit is this tree's), or its tree's bundled model."""
    models: dict[str, dict[str, Path]] = {}
    for side, tree in trees.items():
        sources = [tree / "models" / name for name in args.bundled]
        if args.fits:
            own = args.fits / side if (args.fits / side).is_dir() else args.fits / "this"
            sources += sorted(p for p in own.iterdir() if (p / "config.pbtxt").is_file())
        for src in sources:
            folder = work / side / src.name
            for i in range(args.copies):
                copy_model(src, folder / f"{src.name}-{i:02d}")
            models.setdefault(src.name, {})[side] = folder
    return models


def one_side(tree: Path, models: Path, cache: Path, args) -> dict:
    env = {"INR_RENDER_CACHE_BYTES": "0", "INR_SESSION_CACHE": str(cache)}
    srv = Server(models, models.name, env=env, args=("--memory-budget", args.budget), cwd=tree)
    try:
        srv.wait(300)
        pid = srv.proc.pid
        time.sleep(1)
        idle = rss_of(pid)
        names = sorted(p.name for p in models.iterdir())
        times, peaks, rss = [], [], []
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            detail = c.get(f"/v1/models/{names[0]}").json()
            w, h = min(detail["width"], 512), min(detail["height"], 512)
            for name in names:
                start = time.perf_counter()
                r = c.get(f"/iiif/3/{name}/0,0,{w},{h}/{w},/0/default.jpg")
                times.append((time.perf_counter() - start) * 1000)
                assert r.status_code == 200, r.text
                peaks.append(hwm_of(pid))
                time.sleep(0.5)
                rss.append(rss_of(pid))
            accounted = metric(srv.url, "inr_model_resident_bytes")
            resident = metric(srv.url, "inr_models_resident")
    finally:
        srv.stop()
    n = len(names)
    return {
        "idle_mib": round(idle / MIB, 1),
        "rss_1_mib": round(rss[0] / MIB, 1),
        "rss_n_mib": round(rss[-1] / MIB, 1),
        "grown_1_mib": round((rss[0] - idle) / MIB, 1),
        "grown_per_model_mib": round((rss[-1] - rss[0]) / MIB / max(n - 1, 1), 1),
        "peak_first_load_mib": round(peaks[0] / MIB, 1),
        "peak_loads_mib": round(max(peaks) / MIB, 1),
        "accounted_n_mib": round(accounted / MIB, 1),
        "accounted_over_grown": round(accounted / max(rss[-1] - idle, 1), 2),
        "models_resident": resident,
        "first_tile_empty_ms": round(times[0], 1),
        "first_tile_filled_ms": round(statistics.median(times[1:]), 1) if n > 1 else None,
        "file_bytes": (models / names[0] / "1" / "model.onnx").stat().st_size,
    }


def run(args, trees: dict[str, Path]) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-resident-"))
    try:
        models = collections(args, trees, work)
        rounds = []
        for r in range(args.rounds):
            row = {}
            for photo, sides in models.items():
                order = list(trees)[r % len(trees) :] + list(trees)[: r % len(trees)]
                row[photo] = {}
                for side in order:
                    cache = work / f"sessions-{side}-{photo}-{r}"
                    row[photo][side] = one_side(trees[side], sides[side], cache, args)
                    shutil.rmtree(cache, ignore_errors=True)
                row[photo] = {s: row[photo][s] for s in trees}
            rounds.append(row)
        return rounds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ratios(median: dict) -> dict:
    keys = ("rss_1_mib", "rss_n_mib", "grown_1_mib", "grown_per_model_mib", "peak_loads_mib")
    keys += ("accounted_n_mib", "first_tile_empty_ms", "first_tile_filled_ms")
    return {
        f"this_over_{side}": {
            photo: {k: round(s["this"][k] / s[side][k], 3) for k in keys if s["this"][k] and s[side][k]}
            for photo, s in median.items()
        }
        for side in next(iter(median.values()))
        if side != "this"
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.collection_resident", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--photos", type=lambda s: [Path(x) for x in s.split(",")], required=True)
    f.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--fits", type=Path, help="SIDE/NAME model folders (the fit command's --out)")
    r.add_argument("--bundled", type=lambda s: s.split(","), default=[], help="models of each tree's models/")
    r.add_argument("--copies", type=int, default=6)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--budget", default="4GiB")
    r.add_argument("--json", type=Path, help="also write the result here")
    f.add_argument("--baseline", type=Path, required=True, help="another checkout of this project")
    r.add_argument("--baseline", type=Path, action="append", required=True, help="another checkout (repeatable)")
    args = p.parse_args(argv)
    if args.what == "fit":
        result = fit(args)
    else:
        trees = {"this": ROOT, **{("base" if i == 0 else f"base{i + 1}"): b for i, b in enumerate(args.baseline)}}
        result = medians(run(args, trees))
        result["trees"] = {name: str(tree) for name, tree in trees.items()}
        result["ratio"] = ratios(result["median"])
    emit("bench.collection_resident", argv, result, getattr(args, "json", None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
