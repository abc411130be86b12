"""A byte or PSNR target met on the model's real rounding and its real file (the last stage of grid_rate.py's rate
control): the native level rounded on Q steps and Q stepped until the target holds; for a byte target, the finest
Q whose file keeps to it, by bisection on the files themselves (the predicted code lengths are off where the
pixels' better-of-two rounding codes differently, and below a few steps the files are not monotonic in Q).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from modelrepo import ctxcode, tablecode

from ..errors import UsageError
from .grid_quant import exact_8bit
from .grid_refit import LEVELS, round_native_8bit

PSNR_CAP = 100.0


def psnr(sse: float, values: int) -> float:
    mse = sse / max(1, values)
    return PSNR_CAP if mse <= 1e-10 else min(PSNR_CAP, -10 * math.log10(mse))


def code_length(q: np.ndarray, code: str) -> int:
    """The bytes of a table's code: the Rice code's exactly, the context code's within a few bytes (ctxcode.size,
    without running the ANS coder)."""
    return ctxcode.size(q) if code == "ans" else len(tablecode.encode(q))


def stored_code_bytes(table: torch.Tensor, code: str = "rice") -> int:
    """The bytes of a rounded table's code, as the file stores it."""
    exact = exact_8bit(table)
    if exact is None:
        raise RuntimeError("rate control: the native level is not on 8-bit steps after its rounding")
    return code_length(exact[0], code)


NOISY_STEPS = 8  # below this many native steps the better-of-two rounding's codes are noise: a few steps' file can be
# larger than a finer rounding's (a test fit: 31,155 bytes at 2 steps, 40,016 at 3, 33,380 at 9)


def step_to_target(model, coords, targets, w, h, bounds, target, rate, levels: int, file_bytes) -> tuple:
    """Round the native level (from `rate.table`, its refitted values) on `levels` steps and step until `target`
    (grid_rate.Target) holds: (levels, native code bytes, PSNR over the training pixels, file bytes or None).
    UsageError when a hard target cannot be met; a soft one keeps the closest (the report says it missed)."""
    table, values, code = model.encoding.tables[-1], int(targets.size), rate.code
    smallest, probed, over_at = math.inf, False, LEVELS + 1
    good, corrected = None, False  # a byte target: the largest Q whose file kept to it; the counts corrected once
    for _ in range(LEVELS):  # the real rounding, stepped until it meets the target
        with torch.no_grad():
            table[0, 0].copy_(rate.table)
        sse = round_native_8bit(model, coords, targets, w, h, bounds, levels)
        native, got = stored_code_bytes(table, code), psnr(sse, values)
        size = file_bytes() if target.bytes is not None else None  # the file as written: tables, decoders, graph
        if size is not None:  # not always the coarsest step's: one or two steps of noise code worse than a few
            smallest = min(smallest, size)
        if size is not None and size > target.bytes:
            over_at = min(over_at, levels)
            if good is not None:  # the corrected step went over: back to the last that kept to it
                levels = good
                continue
            if levels == 1 and not probed:  # one step codes a pattern of noise: two to four may code smaller
                probed, sizes = True, {1: size}
                for q in (2, 3, 4):
                    with torch.no_grad():
                        table[0, 0].copy_(rate.table)
                    round_native_8bit(model, coords, targets, w, h, bounds, q)
                    sizes[q] = file_bytes()
                smallest = min(sizes.values())
                fits = [q for q, n in sizes.items() if n <= target.bytes]
                if fits or target.soft:  # the finest that fits, else (soft) the smallest, rounded again
                    levels = max(fits) if fits else min(sizes, key=sizes.get)
                    if fits:
                        continue
                    with torch.no_grad():
                        table[0, 0].copy_(rate.table)
                    sse = round_native_8bit(model, coords, targets, w, h, bounds, levels)
                    native, got, size = stored_code_bytes(table, code), psnr(sse, values), file_bytes()
                    break
            if levels == 1 and target.soft:  # the smallest file this grid makes, over the target: kept, and said
                break
            if levels == 1:
                raise UsageError(
                    f"--target-bytes {target.bytes}: the smallest file this grid makes is {smallest} bytes (its "
                    f"coarser levels, head and graph); ask for more, or a smaller grid (--grid-bytes-per-pixel)"
                )
            levels -= max(1, levels // 16)
            continue
        if size is not None and not corrected:  # within it: the finest Q whose file keeps to it, by bisection on the
            corrected, good = True, levels  # files themselves up to the coarsest Q found over (the counts' code
            lo = levels  # lengths are off where the pixels' better-of-two rounding codes differently); a file over
            hi = over_at if over_at >= NOISY_STEPS else LEVELS + 1  # it at a few steps says nothing of finer ones
            if hi - lo > 1:
                while hi - lo > 1:
                    mid = min(hi - 1, max(lo + 1, round(math.sqrt(lo * hi))))
                    with torch.no_grad():
                        table[0, 0].copy_(rate.table)
                    round_native_8bit(model, coords, targets, w, h, bounds, mid)
                    lo, hi = (mid, hi) if file_bytes() <= target.bytes else (lo, mid)
                levels = lo  # rounded again: the table holds the last Q tried
                continue
        if target.psnr is not None and got < target.psnr:
            if levels == LEVELS and target.soft:
                break
            if levels == LEVELS:
                raise UsageError(
                    f"--target-psnr {target.psnr:g}: this fit reaches {got:.2f} dB at most; ask for less, or fit "
                    f"longer (--steps) or a larger grid (--grid-bytes-per-pixel)"
                )
            levels = min(LEVELS, levels + max(1, levels // 16))
            continue
        break
    return levels, native, got, size


def missed(report: dict) -> str | None:
    """What a soft target's report says it missed, in one line (None when it kept to its target)."""
    if report.get("target_psnr_missed"):
        return (
            f"target_psnr {report['target_psnr']:g} is beyond this fit: it reaches {report['psnr_train']:.2f} dB at "
            f"most, and that model was kept (fit longer, or a larger grid, for more)"
        )
    if report.get("target_bytes_missed"):
        return (
            f"target_bytes {report['target_bytes']} is below the smallest file this grid makes: the smallest, "
            f"{report['file_bytes']} bytes at {report['psnr_train']:.2f} dB, was kept"
        )
    return None
