"""`grid`: a multiresolution grid of trainable features (instant-ngp, Müller et al. 2022), in pure PyTorch.

L levels, F features each. Level l has n_l = base·b^l cells along the image's longer side, b geometric
from `base` to `finest` (GridConfig), and the shorter side in proportion (rounded, at least 1), so cells are
square in image pixels. By default the finest level is as fine as the byte budget allows with every level
dense (at most native); with a table size T given, it is native and the levels above T are hashed. A feature sits
at each cell centre: cell
(i, j) of an rx × ry level is at ((j+0.5)/rx, (i+0.5)/ry), the pixel-centre convention of the model's
coordinates, and features are bilinear between centres and constant beyond the outer ones.

- A level of at most T = 2^log2_table cells is *dense*: an [F, ry, rx] table read through
  `grid_sample` (bilinear, align_corners=False — exactly the cell-centre convention above — border padding;
  ONNX GridSample, opset 16+).
- A larger level is *hashed* into T entries with instant-ngp's spatial hash,
  h(x, y) = (x·1 ⊕ y·2654435761) mod T, its four corners gathered and blended by hand (ONNX Floor, Clip,
  Cast, Mul, BitwiseXor, BitwiseAnd, Gather; BitwiseXor needs opset 18, which `graph_opset` asks for).

The features of all levels are concatenated, coarsest first: [N, ΣF].

**The finest level at the native pixels** (`finest_features` below `features`, e.g. 1: the luma).
Cells that sit exactly on the pixels hold them exactly, while cells at 0.9× the pixels already lose the
detail of a sharp photo (a Lanczos downscale to 0.92× and bilinear back: 35 dB on a mountain landscape, against
55 dB for its luma at 1.0× with the chroma at 0.5×). So with fewer features on the finest level, and the finest
level derived, it is put at the native size and the coarser levels are geometric from the base up to the
largest size the rest of the byte budget allows (`native_ladder`); below about 1 byte per pixel that is not
possible, and the ladder is geometric to the finest that fits, as for equal features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from fitstore.presets import RD_LAMBDA

from ..errors import UsageError
from .base import EncodingConfig, OptionError

PRIME_Y = 2654435761  # instant-ngp's second prime (the first is 1)
INIT = 1e-4  # tables start uniform in ±INIT (instant-ngp)
# The ranges the CLI, the worker and the constructor accept (inclusive).
LIMITS = {
    "levels": (1, 32),
    "features": (1, 16),
    "finest_features": (1, 16),
    "log2_table": (8, 26),
    "base": (1, 32768),
    "finest": (1, 32768),
    "bytes_per_pixel": (0.01, 64.0),
    "rd_lambda": RD_LAMBDA,
    "rd_steps": (1, 100_000),
}
TABLE_BITS = (8, 16)
TABLE_CODES = ("rice", "ans")  # grid_code.py
HASH_OPSET = 18


@dataclass
class GridConfig(EncodingConfig):
    """L levels of F features, resolutions geometric from `base` to `finest` cells along the image's longer side
    (0: its native pixels), the shorter side in proportion; a level with more than 2^log2_table cells is hashed into
    a table of that size (0: the largest table that keeps the model within `bytes_per_pixel` float16 bytes per
    native pixel). Saved (and given on the command line) with the prefix `grid_`: `grid_levels`, `--grid-levels`."""

    FLAT_PREFIX: ClassVar[str] = "grid_"
    name: str = "grid"
    levels: int = 8
    features: int = 2
    finest_features: int = 0  # features of the finest level (0: features); fewer puts it at the native pixels
    log2_table: int = 0
    base: int = 16
    finest: int = 0
    bytes_per_pixel: float = 1.45  # tables; with the head and the graph a 4 MP file is about 1.46 B/px
    table_bits: int = 16  # bits per table entry in the file: 16 (float16) or 8 (encodings/grid_quant.py)
    table_code: str = "rice"  # how 8-bit tables are coded in the file: rice (any onnxruntime) or ans (grid_code.py)
    rd_lambda: float = 0.0  # > 0: tables fine-tuned on error + λ·rate instead of the rate control (grid_rd.py)
    rd_steps: int = 300


# The messages name each option by its flag, as tests/training/test_grid.py and test_grid_refit.py expect of this
# module; OptionError.option is the option itself.
def check_range(what: str, value: float, allow_zero: bool = False, zero: str = "derived") -> None:
    lo, hi = LIMITS[what]
    if allow_zero and value == 0:
        return
    if not (lo <= value <= hi) or (isinstance(value, float) and not math.isfinite(value)):
        zero = f" (or 0: {zero})" if allow_zero else ""
        raise OptionError(
            "grid", what, f"must be in {lo:g}..{hi:g}{zero}, got {value:g}", subject=f"--grid-{what.replace('_', '-')}"
        )


def validate_options(cfg: GridConfig) -> None:
    """Refuse grid options out of LIMITS, naming the range."""
    check_range("levels", cfg.levels)
    check_range("features", cfg.features)
    check_range("finest_features", cfg.finest_features, allow_zero=True)
    check_range("log2_table", cfg.log2_table, allow_zero=True)
    check_range("base", cfg.base)
    check_range("finest", cfg.finest, allow_zero=True)
    check_range("bytes_per_pixel", float(cfg.bytes_per_pixel))
    check_range("rd_lambda", float(cfg.rd_lambda), allow_zero=True, zero="off")
    check_range("rd_steps", cfg.rd_steps)
    if cfg.rd_lambda and cfg.table_bits != 8:
        raise OptionError("grid", "rd_lambda", "needs --grid-table-bits 8", subject="--grid-rd-lambda")
    if cfg.table_code not in TABLE_CODES:
        codes = ", ".join(TABLE_CODES)
        raise OptionError(
            "grid", "table_code", f"must be one of {codes}, got {cfg.table_code!r}", subject="--grid-table-code"
        )
    if cfg.table_bits not in TABLE_BITS:
        bits = ", ".join(map(str, TABLE_BITS))
        raise OptionError(
            "grid", "table_bits", f"must be one of {bits}, got {cfg.table_bits}", subject="--grid-table-bits"
        )


def level_features(cfg: GridConfig) -> list[int]:
    """F per level, coarsest first: `features`, the finest `finest_features` when given."""
    f = [cfg.features] * cfg.levels
    f[-1] = cfg.finest_features or cfg.features
    return f


def fits_budget(cfg: GridConfig, entries: list[int]) -> bool:
    """Whether tables of `entries` cells per level (× that level's features, at `table_bits` per entry) keep to
    `bytes_per_pixel` bytes per native pixel."""
    w, h = (int(s) for s in cfg.image_size)
    values = sum(n * f for n, f in zip(entries, level_features(cfg)))
    return values * cfg.table_bits / 8 <= cfg.bytes_per_pixel * w * h


def validate(cfg: GridConfig) -> tuple[int, int]:
    """Check the grid options and the image size; return the image's (W, H)."""
    validate_options(cfg)
    w, h = (int(s) for s in cfg.image_size)
    if w < 1 or h < 1:
        raise UsageError(f"the grid encoding needs the image's size [W, H], got {list(cfg.image_size)}")
    if cfg.in_dim != 2:
        raise UsageError("the grid encoding is defined for 2D coordinates")
    return w, h


def level_sizes(cfg: GridConfig) -> list[tuple[int, int]]:
    """[(rx, ry)] per level, coarsest first: geometric along the longer side, the shorter in proportion."""
    w, h = validate(cfg)
    if cfg.finest:
        return sizes_for(cfg, cfg.finest)
    return native_ladder(cfg, w, h) or sizes_for(cfg, derived_finest(cfg, w, h))


def native_ladder(cfg: GridConfig, w: int, h: int) -> list[tuple[int, int]] | None:
    """With fewer features on the finest level than the others (and no table size): the finest level at the native
    pixels, the coarser ones geometric from the base to the largest top level within the budget. None when the
    features are equal, a table size is given, there is one level, or the native level alone is over the budget."""
    fine = cfg.finest_features
    if not fine or fine >= cfg.features or cfg.log2_table or cfg.levels < 2:
        return None
    side = max(w, h)

    def ladder(top: int) -> list[tuple[int, int]]:
        return sizes_for(cfg, top, levels=cfg.levels - 1) + [(w, h)]

    if not fits_budget(cfg, [rx * ry for rx, ry in ladder(1)]):
        return None
    lo, hi = 1, max(1, side // 2)  # the top coarse level at most half the native size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_budget(cfg, [rx * ry for rx, ry in ladder(mid)]):
            lo = mid
        else:
            hi = mid - 1
    return ladder(lo)


def derived_finest(cfg: GridConfig, w: int, h: int) -> int:
    """The native longer side, or — when no table size is given either — the largest finest level (at most
    native) whose levels are all dense within `bytes_per_pixel` bytes (at `table_bits` per entry) per native pixel:
    dense levels train several times faster per step than hashed ones on a CPU."""
    side = max(w, h)
    if cfg.log2_table:
        return side
    lo, hi = 1, side
    while lo < hi:  # the cell count grows with `finest`
        mid = (lo + hi + 1) // 2
        if fits_budget(cfg, [rx * ry for rx, ry in sizes_for(cfg, mid)]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def sizes_for(cfg: GridConfig, finest: int, levels: int = 0) -> list[tuple[int, int]]:
    """`levels` (default cfg.levels) sizes geometric from cfg.base to `finest` along the longer side."""
    w, h = (int(s) for s in cfg.image_size)
    base = min(cfg.base, finest)
    n_levels = levels or cfg.levels
    sizes = []
    for level in range(n_levels):
        n = finest if n_levels == 1 else base * (finest / base) ** (level / (n_levels - 1))
        n = max(1, round(n))
        short = max(1, round(n * min(w, h) / max(w, h)))
        sizes.append((n, short) if w >= h else (short, n))
    return sizes


def table_log2(cfg: GridConfig, sizes: list[tuple[int, int]]) -> int:
    """cfg.log2_table; else, with cfg.finest given, the largest T whose tables fit `bytes_per_pixel`
    bytes per pixel; else (derived: every level dense) the smallest T that holds every level."""
    if cfg.log2_table:
        return cfg.log2_table
    lo, hi = LIMITS["log2_table"]
    if not cfg.finest:
        return min(hi, max(lo, math.ceil(math.log2(max(rx * ry for rx, ry in sizes)))))
    best = lo
    for k in range(lo, hi + 1):
        if fits_budget(cfg, [min(rx * ry, 2**k) for rx, ry in sizes]):
            best = k
    return best


class MultiresGrid(nn.Module):
    """coords [N, 2] in [0,1]² → features [N, ΣF] (level l has level_features[l] features)."""

    def __init__(self, cfg: GridConfig):
        super().__init__()
        self.sizes = level_sizes(cfg)
        self.log2_table = table_log2(cfg, self.sizes)
        t = 2**self.log2_table
        self.level_features = level_features(cfg)
        self.dense = [rx * ry <= t for rx, ry in self.sizes]
        g = torch.Generator().manual_seed(cfg.seed)
        self.tables = nn.ParameterList()
        for (rx, ry), dense, f in zip(self.sizes, self.dense, self.level_features):
            shape = (1, f, ry, rx) if dense else (t, f)
            self.tables.append(nn.Parameter((torch.rand(shape, generator=g) * 2 - 1) * INIT))
        self.out_dim = sum(self.level_features)

    @property
    def hashed(self) -> bool:
        return not all(self.dense)

    def entries(self) -> int:
        return sum(p.numel() for p in self.tables)

    def forward(self, v: torch.Tensor, tables: list[torch.Tensor] | None = None) -> torch.Tensor:
        """`tables`: read these instead of the model's own (the rate–distortion fine-tune's noisy ones, grid_rd.py)."""
        grid = (v * 2 - 1).reshape(1, 1, -1, 2)
        out = []
        own = self.tables if tables is None else tables
        for table, (rx, ry), dense, f in zip(own, self.sizes, self.dense, self.level_features):
            if dense:
                s = F.grid_sample(table, grid, mode="bilinear", padding_mode="border", align_corners=False)
                out.append(s.reshape(f, -1).t())
            else:
                out.append(self.hashed_level(table, v, rx, ry))
        return torch.cat(out, dim=1)

    @staticmethod
    def hashed_level(table: torch.Tensor, v: torch.Tensor, rx: int, ry: int) -> torch.Tensor:
        """Bilinear between the four hashed corners around v, border-clamped like grid_sample; one gather."""
        px = v[:, 0] * rx - 0.5
        py = v[:, 1] * ry - 0.5
        fx, fy = torch.floor(px), torch.floor(py)
        wx, wy = px - fx, py - fy
        x0 = fx.clamp(0, rx - 1).long()
        x1 = (fx + 1).clamp(0, rx - 1).long()
        y0 = fy.clamp(0, ry - 1).long() * PRIME_Y
        y1 = (fy + 1).clamp(0, ry - 1).long() * PRIME_Y
        corners = torch.stack([x0, x1, x0, x1], dim=1)  # [N, 4]: (x0,y0) (x1,y0) (x0,y1) (x1,y1)
        rows = torch.stack([y0, y0, y1, y1], dim=1)
        idx = torch.bitwise_and(torch.bitwise_xor(corners, rows), table.shape[0] - 1)
        feats = table.index_select(0, idx.reshape(-1)).reshape(-1, 4, table.shape[1])
        weights = torch.stack([(1 - wx) * (1 - wy), wx * (1 - wy), (1 - wx) * wy, wx * wy], dim=1)
        return (feats * weights.unsqueeze(2)).sum(dim=1)
