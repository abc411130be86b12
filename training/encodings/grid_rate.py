"""Rate control of a grid model with a native 8-bit level: how finely its levels are rounded, chosen for a byte
budget, a PSNR target, or by default the coarsest rounding within LOSS_DB of the finest (docs/training.md, "Byte and
PSNR targets").

With its tables entropy-coded in the file (grid_code.py), a model's bytes are mostly its levels' codes, and a code
shrinks by about a bit per value each time its step doubles, while the error it adds grows with the square of the
step. After training every level is rounded to 255 steps and the native level refitted through that rounding
(grid_refit.py); then:

  - the file's bytes for the native level on Q steps (any Q ≤ 255) are those of the file at Q = 255
    (`Fitted.file_bytes`, one export) less that level's code there plus its code at Q (modelrepo/tablecode.py,
    counted exactly);
  - the training pixels' error at Q is predicted per pixel from one pass at the refitted values: the error there,
    plus the slope of the pixel's colour by its native value (Gauss-Newton, as the refit) times the rounding's move,
    squared;
  - Q is bisected on those counts and predictions; the coarser levels are then rounded again on steps in proportion
    (`coarse_levels`), the native level refitted through them and Q chosen again, against the same reference PSNR,
    and they are kept so only when that pays (`better`);
  - the native level is rounded for real (each pixel to the better of its two nearest steps, `round_native_8bit`),
    and Q stepped until the target holds: for a byte target, on the bytes of the file as it will be written
    (grid_target.py).

LOSS_DB and KAPPA were chosen on validation photos, not the benchmark's (docs/benchmarks.md, model_bytes).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from .grid_quant import round_tables_8bit
from .grid_refit import LEVELS, mlp_layers, pixel_chunks, round_native_8bit, with_slope
from .grid_target import code_length, psnr, step_to_target, stored_code_bytes

log = logging.getLogger(__name__)
LOSS_DB = 0.2  # no target: the coarsest step within this of the finest (validation photos, benchmarks.md)
KAPPA = 1.0  # the coarser levels' steps against the native level's (`coarse_levels`; validation photos)


@dataclass(frozen=True)
class Target:
    """What the rate control keeps to: at most `bytes` in the file, at least `psnr` dB over the training pixels, or
    (neither) at most LOSS_DB below the finest step's PSNR. `soft`: a `psnr` the fit cannot reach keeps the finest
    step, and `bytes` it cannot keep to keeps the coarsest, instead of failing the fit (the report says it missed:
    a job over HTTP, training/worker/job.py, and a block model's overview, training/blocks.py)."""

    bytes: int | None = None
    psnr: float | None = None
    soft: bool = False


SUM_CHUNK = 1 << 20  # pixels per pass of a predicted PSNR: its float64 temporaries stay small


@dataclass
class Pixels:
    """Per training pixel: its native cell (the table's flat index), the error at the refitted value and the squared
    slope, in float32 as they are computed (a float64 copy of each per chunk where they are summed): 12 bytes a pixel,
    where a 14 MP photo's rate control held five float64 or int64 values a pixel, twice, and went past 3 GiB."""

    cell: torch.Tensor
    error: torch.Tensor
    slope2: torch.Tensor

    @classmethod
    @torch.no_grad()
    def measure(cls, model, coords, targets, w, h) -> "Pixels":
        layers = mlp_layers(model.body)
        table = model.encoding.tables[-1][0, 0]
        n, width = len(coords), table.shape[1]
        cell = torch.empty(n, dtype=torch.int32 if table.numel() < 2**31 else torch.int64)
        error, slope2 = torch.empty(n), torch.empty(n)
        at = 0
        for y, row, col, first in pixel_chunks(model, layers, coords, targets, w, h):
            rgb, slope = with_slope(layers, first, table[row, col])
            part = slice(at, at + len(y))
            cell[part] = row * width + col
            error[part], slope2[part] = ((rgb - y) ** 2).sum(dim=1), (slope * slope).sum(dim=1)
            at += len(y)
        return cls(cell, error, slope2)

    def chunks(self):
        """(slice, cells as int64) per SUM_CHUNK pixels."""
        for a in range(0, len(self.cell), SUM_CHUNK):
            part = slice(a, a + SUM_CHUNK)
            yield part, self.cell[part].long()


class NativeRate:
    """The native level's code bytes and the predicted error at Q steps over `bounds` (from `pixels`: None while
    another rounding is tried, `finish_rate`)."""

    def __init__(self, model, pixels: Pixels, bounds: tuple[float, float], values: int, code: str = "rice"):
        self.table = model.encoding.tables[-1][0, 0].detach().clone()
        self.pixels, self.bounds, self.values, self.code = pixels, bounds, values, code

    def codes(self, levels: int) -> torch.Tensor:
        """The table's codes on `levels` steps, float32 (one table's copy: the operations in place)."""
        lo, hi = self.bounds
        if hi - lo <= 1e-6 * max(1.0, abs(lo)):  # one value (a 1×1 photo, a flat one), as round_native_8bit has it
            return torch.zeros_like(self.table)
        q = self.table.clamp(lo, hi)
        return q.sub_(lo).div_((hi - lo) / levels).round_().clamp_(0, levels)

    def code_bytes(self, q: torch.Tensor) -> int:
        return code_length(q.numpy().astype(np.uint8)[None, None], self.code)

    def predicted_psnr(self, levels: int) -> float:
        lo, hi = self.bounds
        codes, flat, px, sse = self.codes(levels).reshape(-1), self.table.reshape(-1), self.pixels, 0.0
        for part, cell in px.chunks():  # each pixel's refitted value gathered per chunk, not held for every pixel
            moved = lo + codes[cell].double() * ((hi - lo) / levels) - flat[cell].double()
            sse += float((px.error[part].double() + px.slope2[part].double() * moved * moved).sum())
        return psnr(sse, self.values)


def choose_levels(
    rate: NativeRate, target: Target, fixed: int, reference: float | None = None, ratio: float = 1.0
) -> tuple[int, float]:
    """(Q, the finest step's predicted PSNR): for a byte target the largest Q in 1..255 whose file the counts say
    keeps to it (the best PSNR within it: `fixed` bytes besides the native code, counted at nearest rounding and
    scaled by `ratio`), else the smallest Q that the predictions say meets the PSNR target, or without one, the
    coarsest within LOSS_DB of `reference` (default: the finest step's PSNR)."""
    finest = rate.predicted_psnr(LEVELS)
    if target.bytes is None and target.psnr is None and LOSS_DB <= 0:
        return LEVELS, finest
    if target.bytes is not None:
        over = first(lambda levels: fixed + ratio * rate.code_bytes(rate.codes(levels)) > target.bytes)
        return (LEVELS if over is None else max(1, over - 1)), finest
    floor = target.psnr if target.psnr is not None else (finest if reference is None else reference) - LOSS_DB
    enough = first(lambda levels: rate.predicted_psnr(levels) >= floor)
    return (LEVELS if enough is None else enough), finest


def first(test) -> int | None:
    """The smallest Q in 1..255 for which `test` holds, for a test that holds from some Q on (bisection on log Q);
    None when it holds for none."""
    if not test(LEVELS):
        return None
    if test(1):
        return 1
    lo, hi = 1, LEVELS  # test(lo) is false, test(hi) true
    while hi - lo > 1:
        mid = min(max(round(math.sqrt(lo * hi)), lo + 1), hi - 1)
        if test(mid):
            hi = mid
        else:
            lo = mid
    return hi


def coarse_levels(sizes: list[tuple[int, int]], pixels: int, native: int) -> list[int]:
    """Steps for the coarser levels given the native level's `native` steps: a cell of a level of n cells moves about
    pixels/n pixels, so the error it adds weighs that much more, and the step that balances it is the native's times
    √(n/pixels). Each level keeps its own range (the 255 steps every level had before, widened as the native's
    were): Q_l = native / (KAPPA·√(n/pixels)), at most 255."""
    return [min(LEVELS, max(1, round(native / (KAPPA * math.sqrt(rx * ry / pixels))))) for rx, ry in sizes]


def standing(target: Target, rate: NativeRate, levels: int, tables) -> float:
    """What `better` weighs a rounding by (its NativeRate, its Q, its coarse tables): for a byte target its predicted
    PSNR, else the code bytes of its tables."""
    if target.bytes is not None:
        return rate.predicted_psnr(levels)
    return rate.code_bytes(rate.codes(levels)) + sum(stored_code_bytes(t, rate.code) for t in tables)


def better(target: Target, before: float, after: tuple, finest: float) -> bool:
    """Whether the coarser levels' rounding (`after`: its NativeRate, its Q, its coarse tables) beats keeping them on
    255 steps (`before`: that rounding's `standing`): for a byte target, a higher predicted PSNR within the budget;
    else, the PSNR floor still met (the target's, or LOSS_DB below the finest) with fewer code bytes in the tables."""
    rate1, q1, tables1 = after
    if target.bytes is not None:
        return standing(target, rate1, q1, tables1) > before
    floor = target.psnr if target.psnr is not None else finest - LOSS_DB
    if rate1.predicted_psnr(q1) < floor:
        return False
    return standing(target, rate1, q1, tables1) < before


def finish_rate(
    model, coords, targets, w, h, bounds, target: Target, file_bytes, originals=None, refit=None, code: str = "rice"
) -> dict:
    """Round the coarser levels and the refitted native level to the steps the target asks for; the report for the
    fit's history. `originals`: the coarser levels' tables before their 8-bit rounding, `refit()`: the native level
    refitted again (both to round the coarser levels coarser; without them they keep 255 steps). UsageError when
    the target cannot be met by this grid (a byte budget below its coarse levels and head, a PSNR above its finest
    rounding). `file_bytes()`: the bytes of the model's file as it is now."""
    values, enc = int(targets.size), model.encoding
    native_table = enc.tables[-1]

    def measured() -> tuple[NativeRate, int]:
        rate = NativeRate(model, Pixels.measure(model, coords, targets, w, h), bounds, values, code)
        if target.bytes is None:
            return rate, 0
        round_native_8bit(model, coords, targets, w, h, bounds, LEVELS)  # the file at the finest native rounding,
        fixed = file_bytes() - stored_code_bytes(native_table, code)  # less its native code: what the rest takes
        with torch.no_grad():
            native_table[0, 0].copy_(rate.table)
        return rate, fixed

    rate, fixed = measured()
    levels, finest = choose_levels(rate, target, fixed)
    coarse = [LEVELS] * (len(enc.tables) - 1)
    trial = coarse_levels(enc.sizes[:-1], w * h, levels)
    if originals is not None and refit is not None and min(trial) < LEVELS:
        kept = [t.detach().clone() for t in enc.tables[:-1]]
        before = standing(target, rate, levels, kept)
        rate.pixels = None  # not held beside the trial's (12 bytes a pixel); measured again if the trial loses
        with torch.no_grad():
            for table, original in zip(enc.tables[:-1], originals):
                table.copy_(original)
        round_tables_8bit(model, trial + [LEVELS])
        with torch.no_grad():
            native_table[0, 0].copy_(rate.table)
        refit()
        coarser, fixed2 = measured()
        levels2, _ = choose_levels(coarser, target, fixed2, reference=finest)
        if better(target, before, (coarser, levels2, enc.tables[:-1]), finest):
            coarse, rate, fixed, levels = trial, coarser, fixed2, levels2
        else:  # the coarser levels cost more than they save (a photo whose coarse levels carry the detail)
            coarser = None
            with torch.no_grad():
                for table, old in zip(enc.tables[:-1], kept):
                    table.copy_(old)
                native_table[0, 0].copy_(rate.table)
            if target.bytes is not None:  # the model as when they were measured: the same pixels, for the counts
                rate.pixels = Pixels.measure(model, coords, targets, w, h)
    levels, native, got, size = step_to_target(model, coords, targets, w, h, bounds, target, rate, levels, file_bytes)
    report = {
        "native_levels": levels,
        "coarse_levels": coarse,
        "native_code_bytes": native,
        "psnr_train": round(got, 3),
        "psnr_train_finest_predicted": round(finest, 3),
    }
    if target.bytes is not None:
        report["target_bytes"], report["file_bytes"] = target.bytes, size
        if size is not None and size > target.bytes:  # a soft target out of reach: the coarsest step kept
            report["target_bytes_missed"] = True
    elif target.psnr is not None:
        report["target_psnr"] = target.psnr
        if got < target.psnr:  # a soft target out of reach: the finest step kept
            report["target_psnr_missed"] = True
    else:
        report["loss_db"] = LOSS_DB
    log.info("rate control: %s", report)
    return report
