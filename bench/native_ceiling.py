"""Where a grid's bytes go, with no model at all (docs/benchmarks.md, native_ceiling). Each photo's luma and chroma
(the pyramid start's opponent basis of its RGB) are Lanczos-downscaled to a fraction of the native size and bilinearly
upsampled back; the PSNR over all pixels is what cells at that spacing could hold if they were the downscale. A
fraction of 1 is the photo itself: cells on the pixels.

    python -m bench.native_ceiling val.png kleiber.png seeding.png picos.png    # bench/results/native_ceiling.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from training.encodings.grid_init import BASIS

from .common import log, machine, setup_logging, write_json

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


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("images", nargs="+")
    p.add_argument("--name", default="native_ceiling")
    a = p.parse_args(argv)
    setup_logging()
    rows = {Path(path).stem: ceilings(path) for path in a.images}
    for name, row in rows.items():
        log.info("%s: %s", name, row)
    write_json(a.name, {"machine": machine(), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
