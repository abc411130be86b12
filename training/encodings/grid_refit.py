"""Refit a native-pixel finest level after the others are rounded (8-bit tables, float16 head).

Rounding a coarse level's table to 8 bits moves every pixel its cells cover: on a 4 MP photo, rounding the seven
coarse levels of a native-luma grid cost 3.1 dB (46.97 → 43.88 dB, docs/benchmarks.md, native_refit). When the finest
level sits on the native pixels with one feature (encodings/grid.py, `native_ladder`), each training pixel reads
exactly one of its cells, with weight 1: the finest table can then absorb, pixel by pixel, what the rounding of
everything else moved. `refit_native` runs Gauss-Newton on each such cell alone (the model's output at its pixel
is a function of that one value: its derivative by a forward-mode product, the step −(J·r)/(J·J)), keeps a step
only where it lowers that pixel's error, and leaves cells without a training pixel as they were.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import torch

from .grid import MultiresGrid
from .grid_quant import snap

log = logging.getLogger(__name__)
CHUNK = 1 << 16  # pixels per pass: [CHUNK, width] floats stay in the CPU's cache
ITERATIONS = 2  # Gauss-Newton steps; a third gained 0.003 dB on a 4 MP photo
CLIP_QUANTILE = 1e-4  # an 8-bit native level is rounded over its values' quantiles 1e-4 … 1 − 1e-4
LEVELS = 255


def native_level(model: torch.nn.Module, w: int, h: int) -> int | None:
    """The index of a finest level of one feature on the native pixels (dense), else None."""
    enc = getattr(model, "encoding", None)
    if not isinstance(enc, MultiresGrid) or not enc.dense[-1] or enc.level_features[-1] != 1:
        return None
    return len(enc.sizes) - 1 if enc.sizes[-1] == (w, h) else None


def mlp_layers(body: torch.nn.Module) -> list[torch.nn.Linear] | None:
    """The Linear layers of a body Linear, ReLU, …, Linear; None for any other body."""
    mods = list(body) if isinstance(body, torch.nn.Sequential) else []
    if not mods or any(not isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in mods):
        return None
    if [type(m) for m in mods] != [torch.nn.Linear, torch.nn.ReLU] * (len(mods) // 2) + [torch.nn.Linear]:
        return None
    return [m for m in mods if isinstance(m, torch.nn.Linear)]


def with_slope(
    layers: list[torch.nn.Linear], first: torch.Tensor, z: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's rgb at the pixels and its derivative by the finest value z: `first` is the first layer's
    output without z's column (fixed while z moves); forward-mode through the ReLUs and Linears by hand
    (torch.func.jvp took 11× longer here)."""
    w0 = layers[0].weight[:, -1]
    pre = torch.addcmul(first, z[:, None], w0[None, :])
    tangent = w0.expand_as(pre)
    for layer in layers[1:]:
        on = pre > 0
        h, tangent = pre.clamp_min(0), tangent * on
        pre, tangent = torch.addmm(layer.bias, h, layer.weight.t()), tangent @ layer.weight.t()
    rgb = torch.sigmoid(pre)
    return rgb, rgb * (1 - rgb) * tangent


def pixel_chunks(
    model: torch.nn.Module, layers: list[torch.nn.Linear], coords: np.ndarray, targets: np.ndarray, w: int, h: int
):
    """Per CHUNK training pixels: (targets [n, 3], native cell rows, columns, the first layer's output without the
    native feature's column)."""
    enc, w_rest = model.encoding, layers[0].weight[:, :-1]
    for start in range(0, len(coords), CHUNK):
        x = torch.from_numpy(np.ascontiguousarray(coords[start : start + CHUNK]))
        y = torch.from_numpy(np.ascontiguousarray(targets[start : start + CHUNK]))
        col = (x[:, 0] * w).floor().long().clamp(0, w - 1)
        row = (x[:, 1] * h).floor().long().clamp(0, h - 1)
        yield y, row, col, torch.addmm(layers[0].bias, enc(x)[:, :-1], w_rest.t())


@torch.no_grad()
def refit_native(
    model: torch.nn.Module,
    coords: np.ndarray,
    targets: np.ndarray,
    w: int,
    h: int,
    iterations: int = ITERATIONS,
    bounds: tuple[float, float] | None = None,
) -> dict | None:
    """Refit the native finest level in place to the training pixels (coords [N, 2] at pixel centres, targets
    [N, 3]), each value kept within `bounds` if given; the other parameters stay as they are. Returns what it
    did, or None when the model has no such level or its head is not an MLP."""
    level = native_level(model, w, h)
    layers = mlp_layers(model.body)
    if level is None or layers is None:
        return None
    t0 = time.perf_counter()
    table = model.encoding.tables[level][0, 0]  # [h, w]
    lo, hi = bounds if bounds is not None else (-float("inf"), float("inf"))
    before = after = 0.0
    for y, row, col, first in pixel_chunks(model, layers, coords, targets, w, h):
        z = table[row, col].clone()
        rgb, slope = with_slope(layers, first, z)
        err = ((rgb - y) ** 2).sum(dim=1)
        before += float(err.sum())
        for _ in range(iterations):
            step = -((rgb - y) * slope).sum(dim=1) / ((slope * slope).sum(dim=1) + 1e-12)
            trial = (z + step).clamp(lo, hi)
            rgb_t, slope_t = with_slope(layers, first, trial)
            e = ((rgb_t - y) ** 2).sum(dim=1)
            better = e < err
            z, err = torch.where(better, trial, z), torch.where(better, e, err)
            rgb, slope = torch.where(better[:, None], rgb_t, rgb), torch.where(better[:, None], slope_t, slope)
        after += float(err.sum())
        table[row, col] = z
    n = max(1, targets.size)
    report = {
        "pixels": int(len(coords)),
        "seconds": round(time.perf_counter() - t0, 2),
        "mse_before": before / n,
        "mse_after": after / n,
    }
    log.info("native level refitted: %s", report)
    return report


def clip_bounds(table: torch.Tensor, quantile: float) -> tuple[float, float]:
    """The range an 8-bit native level is rounded on: its values' quantiles `quantile` and 1 − `quantile`
    (a few saturated pixels would otherwise set the step for all of them)."""
    values = table.detach().reshape(-1).numpy()
    if quantile <= 0 or values.size < 2:
        return float(values.min()), float(values.max())
    lo, hi = np.quantile(values, [quantile, 1 - quantile])
    return float(lo), float(hi)


@torch.no_grad()
def round_native_8bit(
    model: torch.nn.Module,
    coords: np.ndarray,
    targets: np.ndarray,
    w: int,
    h: int,
    bounds: tuple[float, float],
    levels: int = LEVELS,
) -> float:
    """Round the native level to `levels` steps over `bounds` (255: the finest 8-bit codes; fewer: the rate control's
    coarser steps, grid_rate.py), each training pixel's cell to whichever of its two nearest steps gives that pixel
    the smaller error (the others to the nearest); the table then holds both ends, and is written so that
    grid_quant's rounding finds these codes again (`snap`). Returns the training pixels' summed squared error."""
    layers = mlp_layers(model.body)
    table = model.encoding.tables[-1][0, 0]
    lo, hi = bounds
    if hi - lo <= 1e-6 * max(1.0, abs(lo)):  # one value (a 1×1 photo, a flat one): no steps to choose between
        table.fill_(lo)
        return sum(
            float(((with_slope(layers, first, table[row, col])[0] - y) ** 2).sum())
            for y, row, col, first in pixel_chunks(model, layers, coords, targets, w, h)
        )
    scale = (hi - lo) / levels
    q = torch.round((table.clamp(lo, hi) - lo) / scale)
    total = 0.0
    for y, row, col, first in pixel_chunks(model, layers, coords, targets, w, h):
        down = torch.floor((table[row, col].clamp(lo, hi) - lo) / scale).clamp(0, levels)
        up = (down + 1).clamp(max=levels)
        e_down = ((with_slope(layers, first, lo + down * scale)[0] - y) ** 2).sum(dim=1)
        e_up = ((with_slope(layers, first, lo + up * scale)[0] - y) ** 2).sum(dim=1)
        q[row, col] = torch.where(e_up < e_down, up, down)
        total += float(torch.minimum(e_up, e_down).sum())
    flat = q.reshape(-1)
    if flat.min() > 0:
        flat[flat.argmin()] = 0
    if flat.max() < levels:
        flat[flat.argmax()] = levels
    table.copy_(q * scale + lo)
    snap(model.encoding.tables[-1], q[None, None], levels)
    return total


def finish_native(
    model: torch.nn.Module,
    coords: np.ndarray,
    targets: np.ndarray,
    w: int,
    h: int,
    table_bits: int,
    rate: Callable[[tuple[float, float]], dict] | None = None,
) -> dict | None:
    """After the head and the other tables are rounded: refit the native level to the training pixels and round
    it as it will be stored (8 bits over its clipped range: by `rate(bounds)`, the rate control's steps, when given;
    else float16). None when there is no native level."""
    if native_level(model, w, h) is None or mlp_layers(model.body) is None:
        return None
    table = model.encoding.tables[-1]
    bounds = clip_bounds(table, CLIP_QUANTILE) if table_bits == 8 else None
    report = refit_native(model, coords, targets, w, h, bounds=bounds)
    t0 = time.perf_counter()
    if table_bits == 8 and rate is not None:
        report["rate"] = rate(bounds)
    elif table_bits == 8:
        round_native_8bit(model, coords, targets, w, h, bounds)
    else:
        with torch.no_grad():
            table.copy_(table.half().float())
    report["seconds"] = round(report["seconds"] + time.perf_counter() - t0, 2)
    return report
