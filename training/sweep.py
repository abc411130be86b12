"""sweep-scale: the bandwidth trade-off of Gaussian Fourier features.

Small σ underfits (blurry, low train PSNR); large σ overfits the training pixels
(high train PSNR, falling test PSNR): the kernel γ(v1)ᵀγ(v2) gets too narrow to
interpolate between training samples.
"""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

from .cli_image import add_image_options, fit_config, option_flags
from .errors import UsageError
from .fit_image import evaluate, train
from .images import load_image

log = logging.getLogger(__name__)


def parse_scales(text: str) -> list[float]:
    try:
        scales = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--scales must be comma-separated numbers, got '{text}'") from None
    if not scales or any(not (s > 0 and math.isfinite(s)) for s in scales):
        raise UsageError(f"--scales must be positive finite numbers, got '{text}'")
    return scales


def sweep_scale(args: argparse.Namespace, out: Path) -> list[dict]:
    if args.encoding != "gaussian":
        raise UsageError("sweep-scale sweeps the gaussian encoding's σ; use --encoding gaussian")
    if args.protocol != "paper":
        raise UsageError("sweep-scale needs held-out pixels; use --protocol paper")
    scales = parse_scales(args.scales)
    img, _ = load_image(args.image, args.size)
    rows = []
    for s in scales:
        cfg = fit_config(args, scale=s)
        cfg.validate()
        model, hist = train(cfg, img)
        metrics, _ = evaluate(model, img, cfg.protocol)
        rows.append({"scale": s, **metrics, "seconds": hist["train_seconds"]})
        log.info("σ=%g: %s", s, metrics)
    write_results(rows, args, out)
    return rows


def write_results(rows: list[dict], args: argparse.Namespace, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"Gaussian Fourier features, σ sweep: image `{args.image}` at {args.size}², "
        f"{args.model} {args.depth}×{args.width}, {args.steps} steps, lr {args.lr}, seed {args.seed}.",
        "",
        "| σ | train PSNR (dB) | test PSNR (dB) | SSIM | seconds |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scale']:g} | {r['train_psnr']:.2f} | {r['test_psnr']:.2f} | {r['ssim']:.3f} | {r['seconds']:.1f} |"
        )
    tmp_md = out.with_suffix(".md.tmp")
    tmp_md.write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    xs = [r["scale"] for r in rows]
    ax.semilogx(xs, [r["train_psnr"] for r in rows], "o-", label="train")
    ax.semilogx(xs, [r["test_psnr"] for r in rows], "s-", label="test (held-out pixels)")
    ax.set_xlabel("σ (Gaussian scale)")
    ax.set_ylabel("PSNR (dB)")
    ax.set_title(f"{args.image} {args.size}², {args.steps} steps")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp_png = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp_png)
    plt.close(fig)
    tmp_md.rename(out.with_suffix(".md"))
    tmp_png.rename(out.with_suffix(".png"))


def cmd_sweep_scale(args: argparse.Namespace) -> int:
    with option_flags():
        sweep_scale(args, Path(args.out))
    return 0


def register(sub) -> None:
    p = sub.add_parser("sweep-scale", help="train/test PSNR against σ of the Gaussian encoding")
    add_image_options(p)
    p.add_argument("--scales", default="1,2,5,10,20,50,100", help="comma-separated σ values")
    p.add_argument("--out", default="docs/sweep-scale", help="writes OUT.png and OUT.md")
    p.set_defaults(func=cmd_sweep_scale, encoding="gaussian")
