"""Real photos at their native resolution (docs/benchmarks.md, native_fit) — PSNR over all pixels against fitting
time, per preset.

Each preset (fitstore.PRESETS, as the worker runs it; fit-image options after `--` override) fits
the photo for at most --budget seconds of training. At the times in --checkpoints the PSNR over **all**
pixels is measured, its own time excluded from the clock. The fit ends at the budget or at the end of its
schedule; its best weights (a probe of training pixels, training/fit_image.BestWeights) are exported as the
worker would (float16 weights where the preset asks), and the row records the exported model's PSNR over all
pixels and on the held-out pixels (protocol paper: trained on pixels [::2, ::2]), the model files' bytes per
native pixel, and JPEG and WebP of the photo at the same bytes.

    python -m bench.native_fit --image photo.jpg --budget 60 --presets grid,fourier --threads 2
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from fitstore import PRESETS
from training.encodings import grid_init
from training.fit_image import evaluate, export_image_model, finish, predict, train
from training.images import load_image, pixel_centres
from training.metrics import psnr

from .common import fit_image_config, log, machine, set_threads, setup_logging, write_json


class Clock:
    """on_step: stops the fit at the budget; at each checkpoint time, the PSNR over all pixels (not timed)."""

    def __init__(self, img: np.ndarray, budget: float, checkpoints: list[float]):
        self.img, self.budget, self.todo = img, budget, sorted(checkpoints)
        self.coords = pixel_centres(*img.shape[:2]).reshape(-1, 2)
        self.clock, self.curve, self.last, self.steps = 0.0, [], time.perf_counter(), 0

    def __call__(self, step: int, loss: float, model: torch.nn.Module) -> bool:
        self.clock += time.perf_counter() - self.last
        self.steps = step + 1
        while self.todo and self.clock >= self.todo[0]:
            self.todo.pop(0)
            full = predict(model, self.coords, next(model.parameters()).device)
            self.curve.append((step + 1, round(self.clock, 2), psnr(full, self.img.reshape(-1, 3), 3)))
            model.train()
            steps, secs, db = self.curve[-1]
            log.info("  %.1f s, step %d: %.2f dB over all pixels", secs, steps, db)
        self.last = time.perf_counter()
        return self.clock >= self.budget


def codec_at(img: np.ndarray, fmt: str, target_bytes: int) -> dict:
    """The best quality of `fmt` whose file is at most target_bytes (binary search), and its PSNR."""
    u8 = Image.fromarray(np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8))
    best, lo, hi = None, 1, 100
    while lo <= hi:
        q = (lo + hi) // 2
        buf = io.BytesIO()
        u8.save(buf, fmt, quality=q)
        if buf.tell() <= target_bytes:
            best, lo = (q, buf.getvalue()), q + 1
        else:
            hi = q - 1
    if best is None:
        return {"format": fmt, "quality": None, "bytes": None, "psnr": None}
    with Image.open(io.BytesIO(best[1])) as im:
        dec = np.asarray(im.convert("RGB"), np.float32) / 255
    return {"format": fmt, "quality": best[0], "bytes": len(best[1]), "psnr": psnr(dec, img, 3)}


def run_preset(name: str, a: argparse.Namespace, extra: list[str]) -> dict:
    preset = PRESETS[name]
    size = ["--size", str(a.size)] if a.size else []
    argv = [
        "--image",
        a.image,
        *size,
        "--protocol",
        a.protocol,
        "--device",
        a.device,
        "--no-progress",
        "--steps",
        str(a.steps or preset["steps"]),
        *preset["argv"],
        *extra,
    ]
    cfg = fit_image_config(argv)
    img, source = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    h, w = img.shape[:2]
    log.info("%s: %d×%d, %s", name, w, h, " ".join(argv))
    clock = Clock(img, a.budget, [t for t in a.checkpoints if t < a.budget])
    model, history = train(cfg, img, on_step=clock, every=a.every)
    t_finish = time.perf_counter()
    model = finish(model, cfg, img, history)
    finish_seconds = time.perf_counter() - t_finish
    metrics, full = evaluate(model, img, cfg.protocol)
    with tempfile.TemporaryDirectory() as tmp:
        export_image_model(model, cfg, Path(tmp) / "m", source, metrics, history, full)
        files = sum(f.stat().st_size for f in (Path(tmp) / "m" / "1").glob("*.onnx"))
    # the fit's time: training (with its start) and the finish (rounding, a native level's refit)
    row = {
        "preset": name,
        "argv": " ".join(argv),
        "width": w,
        "height": h,
        "train_seconds": round(clock.clock, 2),
        "finish_seconds": round(finish_seconds, 2),
        "fit_seconds": round(clock.clock + finish_seconds, 2),
        "steps": clock.steps,
        "curve": clock.curve,
        **metrics,
        "best_step": history["best_step"],
        "model_bytes": files,
        "bytes_per_pixel": round(files / (w * h), 4),
    }
    row["codecs"] = [codec_at(img, fmt, files) for fmt in ("JPEG", "WEBP")]
    log.info(
        "%s: %.1f s, all pixels %.2f dB, held-out %s dB, %.3f B/px; %s",
        name,
        row["fit_seconds"],
        metrics["full_psnr"],
        metrics.get("test_psnr"),
        row["bytes_per_pixel"],
        row["codecs"],
    )
    return row


def table_md(result: dict) -> str:
    lines = [
        "| preset | W×H | fit s | steps | PSNR all px (dB) | held-out (dB) | B/px | JPEG same bytes | "
        "WebP same bytes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        jpeg, webp = (f"{c['psnr']:.2f} (q{c['quality']})" if c["psnr"] else "–" for c in r["codecs"])
        lines.append(
            f"| {r['preset']} | {r['width']}×{r['height']} | {r.get('fit_seconds', r['train_seconds']):.0f} | "
            f"{r['steps']} | "
            f"{r['full_psnr']:.2f} | {r.get('test_psnr', '–')} | {r['bytes_per_pixel']:.3f} | {jpeg} | "
            f"{webp} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.native_fit", description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True, help="a photo file (or a built-in image name)")
    p.add_argument("--size", type=int, default=0, help="cap on the longer side (0: native)")
    p.add_argument("--presets", default="grid,fourier", help=f"comma-separated, from {', '.join(PRESETS)}")
    p.add_argument("--budget", type=float, default=60.0, help="training seconds per preset")
    p.add_argument("--checkpoints", default="15,30,60,120,300", help="seconds at which PSNR over all pixels is taken")
    p.add_argument("--steps", type=int, default=0, help="schedule length (0: the preset's)")
    p.add_argument("--protocol", default="paper", choices=("paper", "full"))
    p.add_argument("--every", type=int, default=10, help="steps between clock checks")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="native_fit")
    p.add_argument("--out-dir", default=None)
    p.add_argument(
        "--backprojections",
        type=int,
        default=grid_init.BACKPROJECTIONS,
        help="back-projection steps per level of the grid start (default: the shipped %(default)s)",
    )
    a, extra = p.parse_known_args(argv)
    extra = [x for x in extra if x != "--"]
    a.checkpoints = [float(t) for t in a.checkpoints.split(",") if t.strip()]
    setup_logging()
    set_threads(a.threads)
    grid_init.BACKPROJECTIONS = a.backprojections
    result = {
        "machine": machine(),
        "image": a.image,
        "budget_s": a.budget,
        "threads": a.threads,
        "backprojections": a.backprojections,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": list(os.getloadavg()),
        "rows": [],
    }
    for name in [n.strip() for n in a.presets.split(",") if n.strip()]:
        result["rows"].append(run_preset(name, a, extra))
        write_json(a.name, result, a.out_dir)
    result["load_after"] = list(os.getloadavg())
    write_json(a.name, result, a.out_dir)
    print(table_md(result))  # noqa: T201 - a benchmark script's report
    return result


if __name__ == "__main__":
    main()
