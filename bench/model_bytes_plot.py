"""The plot of docs/benchmarks.md, model_bytes: bytes per pixel against PSNR, a panel per photo, from
`bench.model_bytes`'s JSON; and, printed, the table: each grid model beside the codecs' bytes at its PSNR.

    python -m bench.model_bytes_plot bench/results/model_bytes.json docs/img/model-bytes.png
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .common import pyplot

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


if __name__ == "__main__":
    doc = json.loads(Path(sys.argv[1]).read_text())
    plot(doc, Path(sys.argv[2]))
    print(table(doc))
