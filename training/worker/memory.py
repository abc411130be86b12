"""One model or blocks (docs/fits.md, "One model or blocks"): what a one-model grid fit of P pixels takes in a
worker's memory, measured, against the memory the worker has (`--memory`, INR_FIT_WORKER_MEMORY, 2 GiB by default).

The peak resident set of a worker fitting one `grid` model grows about in a line with the pixels (docs/benchmarks.md,
blocks: a fresh `worker --once` per photo, 4 to 24 MP, one torch thread): BASE + PER_PIXEL · P bounds every measured
peak. A job at its native size is one model when that bound is within the worker's memory (and the image within the
preset's `max_pixels`, 25 MP); else it is fitted in blocks, of a side whose bound is within it too. A 2 GiB worker
holds one model of up to 15.8 MP (25.7 MP before the tables' rate control, 11.5 MP with it until its finish and the
export's per-pixel arrays were cut: measured again on 2026-12-05).
"""

from __future__ import annotations

import math

MiB = 1 << 20
GiB = 1 << 30
# A line over the measured peaks (4.0, 12.0, 20.0 and 24.0 MP: at most 964, 1,460, 2,282 and 2,300 MiB), at least
# 5 % above each: torch, onnxruntime and libvips loaded; then a pixel's image, table entries and their Adam state in
# the training, the rate control's per-pixel errors, and the export's decode of the coded tables in its parity run.
BASE = 670 * MiB
PER_PIXEL = 91  # bytes
DEFAULT = 2 * GiB  # the worker's memory when none is given: the giants' target (docs/benchmarks.md, giant)


def one_model_peak(pixels: int) -> int:
    """The most a one-model fit of `pixels` pixels takes in a worker, in bytes (the measured bound)."""
    return BASE + PER_PIXEL * pixels


def one_model_pixels(memory: int) -> int:
    """The most pixels one model may have in a worker of `memory` bytes (0: none fits)."""
    return max(0, (memory - BASE) // PER_PIXEL)


def block_side(memory: int, overlap: int) -> int:
    """The longest square block (its core's side) whose fit, its overlap on both sides included, is within
    `memory`; 0 when none is."""
    side = math.isqrt(one_model_pixels(memory)) - 2 * overlap
    return max(0, side)
