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
    python -m bench.model_bytes --plot-from bench/results/model_bytes.json --plot docs/img/model-bytes.png

With --plot-from, no fit: the plot (bytes per pixel against PSNR, a panel per photo) of a result file, and its table
printed (each grid model beside the codecs' bytes at its PSNR).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .common import log, machine, pyplot, setup_logging, write_json

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


CODECS = {
    "jpeg": ("JPEG (Pillow)", "s-"),
    "webp": ("WebP (Pillow)", "^-"),
    "pyramid": ("libvips pyramid, JPEG tiles", "D-"),
}


def plot(doc: dict, out: Path) -> None:
    plt = pyplot()
    photos = doc["result"]["photos"]
    fig, axes = plt.subplots(1, len(photos), figsize=(5.2 * len(photos), 4.4), squeeze=False)
    for ax, photo in zip(axes[0], photos):
        rows = [r for r in photo["rows"] if "bytes" in r]
        for kind, (label, style) in CODECS.items():
            pts = sorted((r["bytes_per_pixel"], r["psnr"]) for r in rows if r["kind"] == kind)
            ax.plot(*zip(*pts), style, ms=4, lw=1, label=label)
        grid = sorted(
            (r["bytes_per_pixel"], r["psnr"]) for r in rows if r["kind"] == "grid" and r["variant"] == "target"
        )
        if grid:
            ax.plot(*zip(*grid), "o-", color="black", lw=1.5, ms=5, label="grid model, byte targets")
        for variant, marker, label in (
            ("today", "x", "grid model before (uncoded)"),
            ("coded", "+", "the same, entropy-coded"),
            ("default", "*", "grid model, default"),
        ):
            for r in rows:
                if r["kind"] == "grid" and r["variant"] == variant:
                    ax.plot(r["bytes_per_pixel"], r["psnr"], marker, ms=11, mew=2, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("bytes per image pixel at rest")
        ax.set_ylabel("PSNR over the 8-bit pixels (dB)")
        ax.set_title(f"{photo['photo']} ({photo['width']}×{photo['height']})")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def at_psnr(rows: list[dict], kind: str, psnr: float) -> float | None:
    """A codec's bytes per pixel at `psnr`: log bytes interpolated linearly in PSNR between the two qualities that
    bracket it; None outside the qualities measured."""
    pts = sorted((r["psnr"], math.log(r["bytes_per_pixel"])) for r in rows if r["kind"] == kind and "bytes" in r)
    for (p0, b0), (p1, b1) in zip(pts, pts[1:]):
        if p0 <= psnr <= p1 and p1 > p0:
            return math.exp(b0 + (b1 - b0) * (psnr - p0) / (p1 - p0))
    return None


def table(doc: dict) -> str:
    """Markdown: each grid model's bytes per pixel and PSNR, and JPEG's, WebP's and the pyramid's at that PSNR."""
    lines = [
        "| photo | model | bytes | B/px | PSNR | JPEG at that PSNR | WebP | pyramid |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for photo in doc["result"]["photos"]:
        for r in photo["rows"]:
            if r["kind"] != "grid":
                continue
            name = r["variant"] if r["variant"] != "target" else f"target {r['target_bytes']:,} B"
            if "bytes" not in r:
                lines.append(f"| {photo['photo']} | {name} | {r['error']} | | | | | |")
                continue
            codecs = [at_psnr(photo["rows"], k, r["psnr"]) for k in CODECS]
            cells = " | ".join("above the qualities run" if c is None else f"{c:.3f}" for c in codecs)
            size = f"{r['bytes']:,} | {r['bytes_per_pixel']:.3f}"
            lines.append(f"| {photo['photo']} | {name} | {size} | {r['psnr']:.2f} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.model_bytes", description=__doc__.split("\n")[0])
    p.add_argument("--photos", type=lambda s: [Path(x) for x in s.split(",")])
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-model-bytes")
    p.add_argument("--max-pixels", type=int, default=4_100_000)
    p.add_argument("--steps", type=int, default=280)
    p.add_argument("--targets", type=lambda s: [float(x) for x in s.split(",")], default=list(TARGETS))
    p.add_argument("--qualities", type=lambda s: tuple(int(x) for x in s.split(",")), default=QUALITIES)
    p.add_argument("--out", type=Path, default=None, help="a folder for model_bytes.json (default bench/results)")
    p.add_argument("--plot-from", type=Path, help="no fit: plot this result file (and print its table)")
    p.add_argument("--plot", type=Path, help="with --plot-from: the PNG to write")
    args = p.parse_args(argv)
    if args.plot_from:
        if not args.plot:
            p.error("--plot-from needs --plot PNG")
        if not args.plot_from.is_file():
            p.error(f"--plot-from {args.plot_from}: no such file")
        doc = json.loads(args.plot_from.read_text())
        plot(doc, args.plot)
        print(table(doc))
        return
    if not args.photos:
        p.error("--photos is needed (or --plot-from)")
    setup_logging()
    info = machine()
    result = run(args)
    settings = {**vars(args), "photos": [str(x) for x in args.photos], "work": str(args.work), "out": str(args.out)}
    settings.update(plot_from=None, plot=None)
    write_json("model_bytes", {"machine": info, "args": settings, "result": result}, args.out)


if __name__ == "__main__":
    main()
