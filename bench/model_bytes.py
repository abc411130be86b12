"""Bytes against PSNR: grid models at rest beside JPEG, WebP and a libvips pyramid (docs/benchmarks.md, model_bytes).

For each photo (read as `fit-image` reads it, at most --max-pixels): the grid preset is trained once (280 steps,
protocol full; the weights kept in --work, so a second run only finishes), then finished and exported as:

  - `today`: every level rounded to 255 steps, the tables stored uncoded (the tree before e773827, issue 47);
  - `coded`: the same values, entropy-coded in the file (lossless);
  - `default`: the rate control's default (training/encodings/grid_rate.py, LOSS_DB);
  - `target`: one model per --targets value, a byte target of that many bytes per pixel;

and the photo's 8-bit pixels are written by Pillow as JPEG (4:2:0, as Pillow does by default) and WebP at each
--qualities value, and by libvips as a pyramidal TIFF of JPEG tiles (`tiffsave --tile --pyramid --compression jpeg
--Q q`, what bench.classic serves). PSNR is over the 8-bit pixels, the model's render rounded to 8 bits as a tile
is: every point is bytes at rest and what a viewer is shown.

    python -m bench.model_bytes --photos twowings.jpg,calla.png --targets 0.5,0.6 \
        --qualities 50,70,80,90,95 --work /tmp/mb
    python -m bench.model_bytes_plot bench/results/model_bytes.json docs/img/model-bytes.png
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .common import log, machine, setup_logging, write_json

QUALITIES = (30, 50, 70, 80, 90, 95)
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.8)


def psnr8(a: np.ndarray, b: np.ndarray) -> float:
    err = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 100.0 if err == 0 else round(float(10 * math.log10(255.0**2 / err)), 3)


def codecs(pixels: np.ndarray, qualities: tuple[int, ...]) -> list[dict]:
    """JPEG, WebP (Pillow) and the libvips pyramid of the 8-bit pixels at each quality: bytes and PSNR."""
    import pyvips
    from PIL import Image

    h, w, _ = pixels.shape
    image, rows = Image.fromarray(pixels), []
    for q in qualities:
        for fmt, kind, opts in (("JPEG", "jpeg", {}), ("WEBP", "webp", {"method": 6})):
            buf = io.BytesIO()
            image.save(buf, fmt, quality=q, **opts)
            back = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
            rows.append({"kind": kind, "quality": q, "bytes": buf.tell(), "psnr": psnr8(back, pixels)})
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "p.tif"
            vips = pyvips.Image.new_from_memory(np.ascontiguousarray(pixels).data, w, h, 3, "uchar")
            vips.tiffsave(str(path), tile=True, pyramid=True, compression="jpeg", Q=q)
            level0 = pyvips.Image.new_from_file(str(path), page=0)
            back = np.ndarray(buffer=level0.write_to_memory(), dtype=np.uint8, shape=(h, w, level0.bands))[..., :3]
            rows.append({"kind": "pyramid", "quality": q, "bytes": path.stat().st_size, "psnr": psnr8(back, pixels)})
    return rows


def trained(photo: Path, work: Path, max_pixels: int, steps: int):
    """(config, image, trained weights) of the grid preset on the photo, from --work when trained before."""
    from commandline import OneLineParser
    from fitstore import PRESETS
    from training.cli_image import add_image_options, fit_config
    from training.fit_image import train
    from training.images import load_image

    p = OneLineParser(prog="bench")
    add_image_options(p)
    argv = ["--image", str(photo), "--steps", str(steps), "--protocol", "full", "--no-progress"]
    argv += ["--max-pixels", str(max_pixels), *PRESETS["grid"]["argv"]]
    cfg = fit_config(p.parse_args(argv))
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    saved = work / f"{photo.stem}-{steps}.pt"
    if saved.is_file():
        return cfg, img, torch.load(saved, weights_only=True), None
    t0 = time.perf_counter()
    model, _ = train(cfg, img)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save(state, saved)
    return cfg, img, state, round(time.perf_counter() - t0, 1)


def ours(cfg, img, state, variant: str, target_bytes: int | None = None) -> dict:
    """The model finished as `variant` asks: its file's bytes and its 8-bit render's PSNR."""
    from training.encodings import grid_plugin, grid_rate
    from training.fit_image import evaluate, finish, image_file
    from training.image_models import ImageINR

    code, loss = grid_plugin.code_tables, grid_rate.LOSS_DB
    try:
        if variant in ("today", "coded"):  # the finest rounding of every level
            grid_rate.LOSS_DB = 0.0
        if variant == "today":  # and no entropy coding
            grid_plugin.code_tables = lambda data, code="rice": (data, {})
        model = ImageINR(cfg.model)
        model.load_state_dict(state)
        history: dict = {}
        t0 = time.perf_counter()
        c = dataclasses.replace(cfg, target_bytes=target_bytes)
        model = finish(model.eval(), c, img, history)
        seconds = time.perf_counter() - t0
        data, _ = image_file(model, c, [img.shape[1], img.shape[0]])
    finally:
        grid_plugin.code_tables, grid_rate.LOSS_DB = code, loss
    _, full = evaluate(model, img, cfg.protocol)
    rate = (history.get("native_refit") or {}).get("rate", {})
    pixels = np.round(img * 255).astype(np.uint8)
    render = np.round(np.clip(full, 0, 1) * 255).astype(np.uint8)
    return {
        "kind": "grid",
        "variant": variant,
        "target_bytes": target_bytes,
        "bytes": len(data),
        "psnr": psnr8(render, pixels),
        "native_levels": rate.get("native_levels"),
        "coarse_levels": rate.get("coarse_levels"),
        "finish_s": round(seconds, 1),
    }


def run(args) -> dict:
    from training.errors import UsageError

    args.work.mkdir(parents=True, exist_ok=True)
    photos = []
    for photo in args.photos:
        cfg, img, state, train_s = trained(photo, args.work, args.max_pixels, args.steps)
        h, w, _ = img.shape
        pixels = np.round(img * 255).astype(np.uint8)
        rows = codecs(pixels, args.qualities)
        for variant in ("today", "coded", "default"):
            rows.append(ours(cfg, img, state, variant))
            log.info("%s %s: %s", photo.name, variant, rows[-1])
        for bpp in args.targets:
            try:
                rows.append(ours(cfg, img, state, "target", int(bpp * w * h)))
            except UsageError as e:  # below what this grid can make
                rows.append({"kind": "grid", "variant": "target", "target_bytes": int(bpp * w * h), "error": str(e)})
            log.info("%s target %.2f B/px: %s", photo.name, bpp, rows[-1])
        for row in rows:
            if "bytes" in row:
                row["bytes_per_pixel"] = round(row["bytes"] / (w * h), 4)
        photos.append({"photo": photo.name, "width": w, "height": h, "train_s": train_s, "rows": rows})
    return {"photos": photos}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.model_bytes", description=__doc__.split("\n")[0])
    p.add_argument("--photos", required=True, type=lambda s: [Path(x) for x in s.split(",")])
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-model-bytes")
    p.add_argument("--max-pixels", type=int, default=4_100_000)
    p.add_argument("--steps", type=int, default=280)
    p.add_argument("--targets", type=lambda s: [float(x) for x in s.split(",")], default=list(TARGETS))
    p.add_argument("--qualities", type=lambda s: tuple(int(x) for x in s.split(",")), default=QUALITIES)
    p.add_argument("--out", type=Path, default=None, help="a folder for model_bytes.json (default bench/results)")
    args = p.parse_args(argv)
    setup_logging()
    info = machine()
    result = run(args)
    settings = {**vars(args), "photos": [str(x) for x in args.photos], "work": str(args.work), "out": str(args.out)}
    write_json("model_bytes", {"machine": info, "args": settings, "result": result}, args.out)


if __name__ == "__main__":
    main()
