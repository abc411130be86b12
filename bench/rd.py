"""Rate–distortion of photo models against image codecs, with BD-rates (docs/benchmarks.md, rd).

For each photo (a lossless source: a camera photo reduced ≥ 3× with Lanczos and saved as PNG) the grid preset is
trained once (bench.model_bytes.trained: the weights kept in --work) and finished at the default rounding and at
each --targets PSNR, once per --codes table code (the Rice code; the context code, modelrepo/ctxcode.py): every
point is the file's bytes and the PSNR of its render rounded to 8 bits, as a tile is. Beside them, the photo's
pixels through each codec at each quality: Pillow's JPEG 4:4:4 and 4:2:0, WebP (method 6), AVIF and JPEG 2000, and
JPEG XL by imagecodecs when it is installed. With --lambdas, the same weights are also fine-tuned for rate at each
λ (`--grid-rd-lambda`, training/encodings/grid_rd.py; --rd-steps) and coded with the context code: `grid-rd`.

The BD-rate (`bd_rate`) is Bjøntegaard's delta rate with piecewise cubic (PCHIP) interpolation of log-bytes against
PSNR, as JVET's common test conditions compute it: the mean gap in log-bytes over the PSNR range both curves cover,
within --range (34–46 dB by default), as a percentage (negative: fewer bytes than the anchor, JPEG 4:4:4).

    python -m bench.rd --photos /tmp/kleiber.png --targets 36,40,44 --work /tmp/rd
    python -m bench.rd --photos /tmp/kleiber.png --codes ans --lambdas 1e-4,1e-3,1e-2 --work /tmp/rd
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
from pathlib import Path

import numpy as np

from .common import log, machine, setup_logging, write_json
from .model_bytes import psnr8, trained

QUALITIES = (20, 35, 50, 65, 75, 85, 90, 95, 98)
ANCHOR = "jpeg444"


def codecs(pixels: np.ndarray, qualities=QUALITIES) -> list[dict]:
    """The photo through each codec at each quality: bytes and PSNR of the decoded 8-bit pixels."""
    from PIL import Image

    image, rows = Image.fromarray(pixels), []
    kinds = {
        "jpeg444": ("JPEG", lambda q: {"quality": q, "subsampling": 0}),
        "jpeg420": ("JPEG", lambda q: {"quality": q, "subsampling": 2}),
        "webp": ("WEBP", lambda q: {"quality": q, "method": 6}),
        "avif": ("AVIF", lambda q: {"quality": q}),
        "j2k": ("JPEG2000", lambda q: {"quality_mode": "rates", "quality_layers": [j2k_ratio(q)]}),
    }
    for kind, (fmt, opts) in kinds.items():
        for q in qualities:
            buf = io.BytesIO()
            image.save(buf, fmt, **opts(q))
            back = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
            rows.append({"kind": kind, "quality": q, "bytes": buf.tell(), "psnr": psnr8(back, pixels)})
    try:
        import imagecodecs
    except ImportError:
        log.info("imagecodecs is not installed: no JPEG XL")
        return rows
    for q in qualities:
        data = imagecodecs.jpegxl_encode(pixels, level=q, effort=7)
        rows.append(
            {"kind": "jxl", "quality": q, "bytes": len(data), "psnr": psnr8(imagecodecs.jpegxl_decode(data), pixels)}
        )
    return rows


def j2k_ratio(q: int) -> float:
    """A compression ratio for JPEG 2000 that spans the qualities' range: 100 at q 20 down to about 3 at q 98."""
    return round(100 * (3 / 100) ** ((q - 20) / 78), 2)


def bd_rate(anchor: list[tuple[float, float]], test: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    """Bjøntegaard's delta rate of `test` against `anchor` (each (bytes, PSNR) points), in percent, over the PSNR range
    both cover within [lo, hi]; None when they share less than 1 dB there."""
    from scipy.interpolate import PchipInterpolator

    def curve(points):
        pts = sorted({round(p, 4): math.log10(b) for b, p in points}.items())
        kept = [pts[0]]
        for p, lb in pts[1:]:  # a curve whose rate falls as PSNR rises is not an RD curve: keep its hull's rise
            if lb > kept[-1][1]:
                kept.append((p, lb))
        return np.array([p for p, _ in kept]), np.array([lb for _, lb in kept])

    pa, ra = curve(anchor)
    pt, rt = curve(test)
    if len(pa) < 2 or len(pt) < 2:
        return None
    low, high = max(lo, pa.min(), pt.min()), min(hi, pa.max(), pt.max())
    if high - low < 1.0:
        return None
    grid = np.linspace(low, high, 200)
    gap = np.trapezoid(PchipInterpolator(pt, rt)(grid) - PchipInterpolator(pa, ra)(grid), grid) / (high - low)
    return round(float((10**gap - 1) * 100), 1)


def model_points(cfg, img, state, code: str, targets: list[float]) -> list[dict]:
    """The model finished at the default rounding and at each PSNR target, its tables in `code`."""
    from training.errors import UsageError
    from training.fit_image import evaluate, finish, image_file
    from training.image_models import ImageINR

    enc = dataclasses.replace(cfg.model.encoding, table_code=code)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoding=enc))
    pixels = np.round(img * 255).astype(np.uint8)
    rows = []
    for target in [None, *targets]:
        model = ImageINR(cfg.model)
        model.load_state_dict(state)
        c = dataclasses.replace(cfg, target_psnr=target)
        try:
            model = finish(model.eval(), c, img, {})
        except UsageError as e:
            rows.append({"kind": f"grid-{code}", "target_psnr": target, "error": str(e)})
            continue
        data, _ = image_file(model, c, [img.shape[1], img.shape[0]])
        _, full = evaluate(model, img, cfg.protocol)
        render = np.round(np.clip(full, 0, 1) * 255).astype(np.uint8)
        rows.append({"kind": f"grid-{code}", "target_psnr": target, "bytes": len(data), "psnr": psnr8(render, pixels)})
        log.info("%s %s: %d bytes, %.2f dB", code, target, len(data), rows[-1]["psnr"])
    return rows


def rd_points(cfg, img, state, lambdas: list[float], steps: int) -> list[dict]:
    """The model fine-tuned for rate at each λ (training/encodings/grid_rd.py), its tables in the context code."""
    from training.fit_image import evaluate, finish, image_file
    from training.image_models import ImageINR

    pixels, rows = np.round(img * 255).astype(np.uint8), []
    for lam in lambdas:
        enc = dataclasses.replace(cfg.model.encoding, table_code="ans", rd_lambda=lam, rd_steps=steps)
        c = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoding=enc))
        model = ImageINR(c.model)
        model.load_state_dict(state)
        history: dict = {}
        model = finish(model.eval(), c, img, history)
        data, _ = image_file(model, c, [img.shape[1], img.shape[0]])
        render = np.round(np.clip(evaluate(model, img, c.protocol)[1], 0, 1) * 255).astype(np.uint8)
        row = {"kind": "grid-rd", "lambda": lam, "rd_steps": steps, "bytes": len(data), "psnr": psnr8(render, pixels)}
        rows.append({**row, "rd_seconds": history["rd"]["seconds"]})
        log.info("rd λ %g: %d bytes, %.2f dB, %.0f s", lam, len(data), row["psnr"], history["rd"]["seconds"])
    return rows


def run(args) -> dict:
    args.work.mkdir(parents=True, exist_ok=True)
    photos = []
    for photo in args.photos:
        cfg, img, state, train_s = trained(photo, args.work, args.max_pixels, args.steps)
        h, w, _ = img.shape
        rows = codecs(np.round(img * 255).astype(np.uint8), args.qualities)
        for code in args.codes:
            rows += model_points(cfg, img, state, code, args.targets)
        rows += rd_points(cfg, img, state, args.lambdas, args.rd_steps)
        points = {}
        for r in rows:
            if "bytes" in r:
                points.setdefault(r["kind"], []).append((r["bytes"], r["psnr"]))
        bd = {k: bd_rate(points[ANCHOR], v, *args.range) for k, v in points.items() if k != ANCHOR}
        photos.append({"photo": photo.name, "size": [w, h], "train_s": train_s, "rows": rows, "bd_rate": bd})
        log.info("%s: BD-rate against JPEG 4:4:4 %s", photo.name, bd)
    kinds = sorted({k for p in photos for k in p["bd_rate"]})
    mean = {}
    for k in kinds:
        values = [p["bd_rate"][k] for p in photos if p["bd_rate"].get(k) is not None]
        if values:
            mean[k] = round(float(np.mean(values)), 1)
    return {"machine": machine(), "range_db": list(args.range), "photos": photos, "mean_bd_rate": mean}


def table(doc: dict) -> str:
    """The BD-rates against JPEG 4:4:4 as a markdown table: a row per photo, a column per codec or model."""
    kinds = sorted({k for p in doc["photos"] for k in p["bd_rate"]})
    lines = ["| photo | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for p in doc["photos"]:
        cells = [f"{p['bd_rate'][k]:+.1f} %" if p["bd_rate"].get(k) is not None else "–" for k in kinds]
        lines.append(f"| {p['photo']} {p['size'][0]}×{p['size'][1]} | " + " | ".join(cells) + " |")
    lines.append(
        "| **mean** | " + " | ".join(f"**{doc['mean_bd_rate'].get(k, float('nan')):+.1f} %**" for k in kinds) + " |"
    )
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> None:
    """PSNR against bits per pixel, a panel per photo, a line per codec or model."""
    from .common import pyplot

    plt = pyplot()
    n = len(doc["photos"])
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4.5), squeeze=False)
    for ax, p in zip(axes[0], doc["photos"]):
        pixels = p["size"][0] * p["size"][1]
        for kind in sorted({r["kind"] for r in p["rows"]}):
            pts = sorted((r["bytes"] * 8 / pixels, r["psnr"]) for r in p["rows"] if r["kind"] == kind and "bytes" in r)
            style = "o-" if kind.startswith("grid") else ".--"
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=kind, lw=2 if kind.startswith("grid") else 1)
        ax.set_xscale("log")
        ax.set_ylim(*doc["range_db"])
        ax.set_xlabel("bits per pixel")
        ax.set_ylabel("PSNR (dB, 8-bit RGB)")
        ax.set_title(p["photo"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rd", description=__doc__.split("\n\n")[0])
    p.add_argument("--photos", required=True, type=lambda s: [Path(x) for x in s.split(",")])
    p.add_argument("--targets", default="36,40,44", type=lambda s: [float(x) for x in s.split(",") if x])
    p.add_argument("--codes", default="rice,ans", type=lambda s: [x for x in s.split(",") if x])
    p.add_argument("--lambdas", default="", type=lambda s: [float(x) for x in s.split(",") if x])
    p.add_argument("--rd-steps", type=int, default=300)
    p.add_argument("--range", default="34,46", type=lambda s: tuple(float(x) for x in s.split(",")))
    p.add_argument("--steps", type=int, default=280)
    p.add_argument("--max-pixels", type=int, default=25_000_000)
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-rd"))
    p.add_argument("--qualities", default=",".join(map(str, QUALITIES)), type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--name", default="rd")
    p.add_argument("--out", type=Path, default=None, help="the results' folder (default bench/results)")
    p.add_argument("--plot", type=Path, default=None, help="a PNG of the curves")
    args = p.parse_args(argv)
    setup_logging()
    doc = run(args)
    write_json(args.name, doc, args.out)
    if args.plot:
        plot(doc, args.plot)
    print(table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
