"""Three probes for the native fits (the fits family; docs/benchmarks.md, native_ceiling, native_refit, native_steps).

- `ceiling`: where a grid's bytes go, with no model at all. Each photo's luma and chroma (the pyramid start's
  opponent basis of its RGB) are Lanczos-downscaled to a fraction of the native size and bilinearly upsampled back;
  the PSNR over all pixels is what cells at that spacing could hold if they were the downscale. A fraction of 1 is
  the photo itself: cells on the pixels.
- `refit`: the native level's rounding range, chosen on a validation photo. One fit with the grid preset, then the
  finish repeated from the same weights: no refit (every table rounded over its min … max), and the refit with the
  native level rounded over its quantiles q … 1 − q for each --quantiles value (0: min … max).
- `steps`: a recipe choice, PSNR over all pixels by *step* (not time) on a validation photo. Choosing a learning rate
  or a batch on a loaded machine cannot use time; steps and samples can. Every `--every` steps (the first after one
  step) the model is rendered at every pixel centre and scored (protocol full).

    python -m bench.native_probes ceiling val.png kleiber.png seeding.png picos.png  # results/native_ceiling.json
    python -m bench.native_probes refit --image val.png                              # results/native_refit.json
    python -m bench.native_probes steps --image val.png --steps 150 --every 50 -- --depth 2 --width 32 --lr 1e-3
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from fitstore import PRESETS
from training.encodings import grid_refit
from training.encodings.grid_init import BASIS
from training.encodings.grid_quant import round_tables_8bit
from training.fit_image import checkpoint, evaluate, predict, rebuild, split_pixels, train
from training.fp16 import round_weights_fp16
from training.images import load_image, pixel_centres
from training.metrics import psnr

from .common import fit_image_config, log, machine, set_threads, setup_logging, write_json

CEILING = "where a grid's bytes go, with no model at all: each photo's luma and chroma resampled"
REFIT = "the native level's rounding range, chosen on a validation photo"
STEPS = "PSNR over all pixels by step on a validation photo"

PAIRS = [(0.74, 0.74), (0.86, 0.86), (0.92, 0.92), (0.92, 0.47), (1.0, 0.5)]  # (luma, chroma) × native


def resampled(channel: np.ndarray, fraction: float) -> np.ndarray:
    h, w = channel.shape
    if fraction == 1.0:
        return channel
    small = Image.fromarray(channel).resize((max(1, round(w * fraction)), max(1, round(h * fraction))), Image.LANCZOS)
    t = torch.from_numpy(np.array(small))[None, None]
    return F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)[0, 0].numpy()


def ceilings(path: str) -> dict:
    img = np.asarray(Image.open(path).convert("RGB"), np.float32) / 255
    basis = BASIS.numpy()
    opp = np.einsum("hwc,kc->khw", img, basis)
    out = {}
    for luma, chroma in PAIRS:
        back = np.stack([resampled(opp[0], luma), resampled(opp[1], chroma), resampled(opp[2], chroma)])
        rgb = np.clip(np.einsum("khw,kc->hwc", back, basis), 0, 1)
        out[f"luma {luma}, chroma {chroma}"] = round(float(-10 * np.log10(np.mean((rgb - img) ** 2))), 2)
    return out


def ceiling(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.native_probes ceiling", description=CEILING)
    p.add_argument("images", nargs="+")
    p.add_argument("--name", default="native_ceiling")
    p.add_argument("--out-dir", type=Path, default=None, help="the results' folder (default bench/results)")
    a = p.parse_args(argv)
    setup_logging()
    rows = {Path(path).stem: ceilings(path) for path in a.images}
    for name, row in rows.items():
        log.info("%s: %s", name, row)
    write_json(a.name, {"machine": machine(), "rows": rows}, a.out_dir)
    return rows


def refit(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.native_probes refit", description=REFIT)
    p.add_argument("--image", required=True)
    p.add_argument("--quantiles", default="0,1e-6,1e-5,1e-4,1e-3")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="native_refit")
    p.add_argument("--out-dir", type=Path, default=None, help="the results' folder (default bench/results)")
    a = p.parse_args(argv)
    setup_logging()
    set_threads(a.threads)
    preset = PRESETS["grid"]
    cfg = fit_image_config(
        ["--image", a.image, "--protocol", "full", "--no-progress", "--steps", str(preset["steps"]), *preset["argv"]]
    )
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    h, w = img.shape[:2]
    model, _ = train(cfg, img)
    base = round_weights_fp16(rebuild(checkpoint(model, cfg)))
    coords, targets, _, _ = split_pixels(img, cfg.protocol)

    def score(m) -> float:
        return evaluate(m, img, cfg.protocol)[0]["full_psnr"]

    rows = {"float (head float16)": score(base), "no refit": score(round_tables_8bit(copy.deepcopy(base)))}
    for q in (float(v) for v in a.quantiles.split(",")):
        m = round_tables_8bit(copy.deepcopy(base))
        grid_refit.CLIP_QUANTILE, shipped = q, grid_refit.CLIP_QUANTILE
        t0 = time.perf_counter()
        grid_refit.finish_native(m, coords, targets, w, h, 8)
        grid_refit.CLIP_QUANTILE = shipped
        rows[f"refit, quantile {q:g}"] = score(m)
        log.info("quantile %g: %.3f dB (finish %.1f s)", q, rows[f"refit, quantile {q:g}"], time.perf_counter() - t0)
    write_json(a.name, {"machine": machine(), "image": a.image, "rows": rows}, a.out_dir)
    return rows


def steps(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.native_probes steps", description=STEPS)
    p.add_argument("--image", required=True)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="native_steps")
    p.add_argument("--out-dir", type=Path, default=None, help="the results' folder (default bench/results)")
    a, extra = p.parse_known_args(argv)
    setup_logging()
    set_threads(a.threads)
    argv = [
        "--image",
        a.image,
        "--protocol",
        "full",
        "--no-progress",
        "--steps",
        str(a.steps),
        "--encoding",
        "grid",
        *[x for x in extra if x != "--"],
    ]
    cfg = fit_image_config(argv)
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    coords = pixel_centres(*img.shape[:2]).reshape(-1, 2)
    curve: list[tuple[int, float]] = []

    def on_step(step: int, loss: float, model: torch.nn.Module) -> bool:
        full = predict(model, coords, torch.device("cpu"))
        model.train()
        curve.append((step + 1, psnr(full, img.reshape(-1, 3), 3)))
        log.info("step %d: %.2f dB over all pixels", *curve[-1])
        return False

    t = time.perf_counter()
    _, history = train(cfg, img, on_step=on_step, every=a.every)
    result = {
        "machine": machine(),
        "argv": " ".join(argv),
        "curve": curve,
        "init_seconds": history["init_seconds"],
        "wall_seconds": round(time.perf_counter() - t, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    write_json(a.name, result, a.out_dir)
    return result


PROBES = {"ceiling": ceiling, "refit": refit, "steps": steps}


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in PROBES:
        sys.stderr.write(f"usage: python -m bench.native_probes {{{','.join(PROBES)}}} ...: one of them first\n")
        raise SystemExit(2)
    return PROBES[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
