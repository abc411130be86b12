"""What is not a digit: the pages and images a digit classifier must decline.

    pages      blank (all 0), solid (one grey or white), uniform noise, sparse salt noise
    letters    capitals and small letters that look like no digit, drawn with the DejaVu and Liberation
               fonts at random sizes, strokes, shifts and rotations, white on black like MNIST
    strokes    letters and signs drawn as a pen draws them on the digit pad: thick polylines with jittered
               corners, then made MNIST-like (longer side 20 px, centre of mass at the centre) as the service
               makes a pad's drawing
    items      another data set's images (Fashion-MNIST: clothes, shoes, bags), as they are

All are uint8 [N, 28, 28] like the IDX files; each generator takes its own seed, so the sets that train a
detector, choose its threshold and measure it never share an image.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SIDE = 28
PAGES = ("blank", "solid", "noise", "salt")
# Letters that look like no digit: O o D Q (0), I l i j J (1), Z z (2), S s (5), b G (6), T t Y y (7, 4), B (8),
# g q a P (9) are left out.
LETTERS = "ACEFHKLMNRUVWXcdefhkmnpruvwx"
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")


def pages(kind: str, n: int, seed: int) -> np.ndarray:
    """n pages of one kind (see PAGES)."""
    rng = np.random.default_rng(seed)
    if kind == "blank":
        return np.zeros((n, SIDE, SIDE), np.uint8)
    if kind == "solid":
        level = rng.integers(16, 256, size=(n, 1, 1))
        return np.broadcast_to(level, (n, SIDE, SIDE)).astype(np.uint8)
    if kind == "noise":
        return rng.integers(0, 256, size=(n, SIDE, SIDE)).astype(np.uint8)
    if kind == "salt":
        share = rng.uniform(0.02, 0.3, size=(n, 1, 1))
        return ((rng.random((n, SIDE, SIDE)) < share) * 255).astype(np.uint8)
    raise ValueError(f"unknown page kind '{kind}'; valid: {', '.join(PAGES)}")


@lru_cache(maxsize=1)
def font_files() -> tuple[str, ...]:
    files = sorted(str(p) for d in FONT_DIRS for p in Path(d).glob("*.ttf"))
    return tuple(files) or ("",)  # "" = PIL's built-in font


def letters(n: int, seed: int) -> np.ndarray:
    """n letters of LETTERS, one font, size (16–24 px), stroke (0–2 px), shift (±2 px) and rotation (±12°) each."""
    rng = np.random.default_rng(seed)
    fonts = font_files()
    out = np.empty((n, SIDE, SIDE), np.uint8)
    for i in range(n):
        size = int(rng.integers(16, 25))
        path = fonts[int(rng.integers(len(fonts)))]
        font = ImageFont.truetype(path, size) if path else ImageFont.load_default(size=size)
        im = Image.new("L", (SIDE, SIDE))
        ImageDraw.Draw(im).text(
            (14 + int(rng.integers(-2, 3)), 14 + int(rng.integers(-2, 3))),
            LETTERS[int(rng.integers(len(LETTERS)))],
            fill=255,
            font=font,
            anchor="mm",
            stroke_width=int(rng.integers(0, 3)),
            stroke_fill=255,
        )
        out[i] = np.asarray(im.rotate(float(rng.uniform(-12, 12)), resample=Image.BILINEAR))
    return out


# Pen strokes in a unit box (x right, y down), one polyline per stroke.
SKETCHES = {
    "A": [[(0, 1), (0.5, 0), (1, 1)], [(0.2, 0.6), (0.8, 0.6)]],
    "E": [[(1, 0), (0, 0), (0, 1), (1, 1)], [(0, 0.5), (0.8, 0.5)]],
    "F": [[(1, 0), (0, 0), (0, 1)], [(0, 0.5), (0.8, 0.5)]],
    "H": [[(0, 0), (0, 1)], [(1, 0), (1, 1)], [(0, 0.5), (1, 0.5)]],
    "K": [[(0, 0), (0, 1)], [(1, 0), (0, 0.55), (1, 1)]],
    "M": [[(0, 1), (0, 0), (0.5, 0.6), (1, 0), (1, 1)]],
    "N": [[(0, 1), (0, 0), (1, 1), (1, 0)]],
    "R": [[(0, 1), (0, 0), (0.8, 0), (1, 0.25), (0.8, 0.5), (0, 0.5), (1, 1)]],
    "V": [[(0, 0), (0.5, 1), (1, 0)]],
    "W": [[(0, 0), (0.25, 1), (0.5, 0.4), (0.75, 1), (1, 0)]],
    "X": [[(0, 0), (1, 1)], [(1, 0), (0, 1)]],
    "star": [[(0, 0), (1, 1)], [(1, 0), (0, 1)], [(0, 0.5), (1, 0.5)], [(0.5, 0), (0.5, 1)]],
    "hash": [[(0.3, 0), (0.3, 1)], [(0.7, 0), (0.7, 1)], [(0, 0.3), (1, 0.3)], [(0, 0.7), (1, 0.7)]],
    "triangle": [[(0, 1), (0.5, 0), (1, 1), (0, 1)]],
}
PAD = 112  # px: where strokes are drawn before they are made MNIST-like
BOX = 20  # MNIST's: the longer side of the ink, in the 28 × 28 image


def mnist_like(im: Image.Image) -> np.ndarray:
    """Ink (white on black) cropped, its longer side scaled to 20 px, pasted with its centre of mass at the centre."""
    ink = im.crop(im.getbbox())
    scale = BOX / max(ink.size)
    ink = ink.resize((max(1, round(ink.width * scale)), max(1, round(ink.height * scale))), Image.LANCZOS)
    a = np.asarray(ink, np.float64)
    ys, xs = np.indices(a.shape)
    cy, cx = (ys * a).sum() / a.sum(), (xs * a).sum() / a.sum()
    out = Image.new("L", (SIDE, SIDE))
    out.paste(ink, (int(round(SIDE / 2 - cx - 0.5)), int(round(SIDE / 2 - cy - 0.5))))
    return np.asarray(out)


def strokes(n: int, seed: int) -> np.ndarray:
    """n pad-like drawings of SKETCHES: corners jittered (±8 %), width 50–100 % of height, pen 7–14 % of the
    height, rotation ±12°."""
    rng = np.random.default_rng(seed)
    names = sorted(SKETCHES)
    out = np.empty((n, SIDE, SIDE), np.uint8)
    for i in range(n):
        w, pen = rng.uniform(0.5, 1.0), rng.uniform(0.07, 0.14)
        im = Image.new("L", (PAD, PAD))
        draw = ImageDraw.Draw(im)
        for line in SKETCHES[names[int(rng.integers(len(names)))]]:
            pts = [
                (
                    PAD * (0.5 + (w * (x - 0.5) + rng.uniform(-0.08, 0.08)) * 0.7),
                    PAD * (0.15 + 0.7 * (y + rng.uniform(-0.08, 0.08))),
                )
                for x, y in line
            ]
            draw.line(pts, fill=255, width=max(2, int(pen * PAD * 0.7)), joint="curve")
        out[i] = mnist_like(im.rotate(float(rng.uniform(-12, 12)), resample=Image.BILINEAR))
    return out


def synthetic(n: int, seed: int) -> dict[str, np.ndarray]:
    """n images of each page kind, n letters and n strokes: {"blank": …, "solid": …, "noise": …, "salt": …,
    "letters": …, "strokes": …}."""
    out = {kind: pages(kind, n, seed + i) for i, kind in enumerate(PAGES)}
    out["letters"] = letters(n, seed + len(PAGES))
    out["strokes"] = strokes(n, seed + len(PAGES) + 1)
    return out
