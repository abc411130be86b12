"""`grid`: a multiresolution grid of trainable features (instant-ngp, Müller et al. 2022), in pure PyTorch.

L levels, F features each. Level l has n_l = base·b^l cells along the image's longer side, b geometric
from `grid_base` to `grid_finest`, and the shorter side in proportion (rounded, at least 1), so cells are
square in image pixels. By default the finest level is as fine as the byte budget allows with every level
dense (at most native); with a table size T given, it is native and the levels above T are hashed. A feature sits at each cell centre: cell
(i, j) of an rx × ry level is at ((j+0.5)/rx, (i+0.5)/ry), the pixel-centre convention of the model's
coordinates, and features are bilinear between centres and constant beyond the outer ones.

- A level of at most T = 2^grid_log2_table cells is *dense*: an [F, ry, rx] table read through
  `grid_sample` (bilinear, align_corners=False — exactly the cell-centre convention above — border padding;
  ONNX GridSample, opset 16+).
- A larger level is *hashed* into T entries with instant-ngp's spatial hash,
  h(x, y) = (x·1 ⊕ y·2654435761) mod T, its four corners gathered and blended by hand (ONNX Floor, Clip,
  Cast, Mul, BitwiseXor, BitwiseAnd, Gather; BitwiseXor needs opset 18, which `graph_opset` asks for).

The features of all levels are concatenated, coarsest first: [N, ΣF].

**The finest level at the native pixels** (`grid_finest_features` below `grid_features`, e.g. 1: the luma).
Cells that sit exactly on the pixels hold them exactly, while cells at 0.9× the pixels already lose the
detail of a sharp photo (a Lanczos downscale to 0.92× and bilinear back: 35 dB on a mountain landscape, against
55 dB for its luma at 1.0× with the chroma at 0.5×). So with fewer features on the finest level, and the finest
level derived, it is put at the native size and the coarser levels are geometric from the base up to the
largest size the rest of the byte budget allows (`native_ladder`); below about 1 byte per pixel that is not
possible, and the ladder is geometric to the finest that fits, as for equal features.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError
from .config import EncodingConfig

PRIME_Y = 2654435761          # instant-ngp's second prime (the first is 1)
INIT = 1e-4                   # tables start uniform in ±INIT (instant-ngp)
# The ranges the CLI, the worker and the constructor accept (inclusive).
LIMITS = {"levels": (1, 32), "features": (1, 16), "finest_features": (1, 16), "log2_table": (8, 26), "base": (1, 32768),
          "finest": (1, 32768), "bytes_per_pixel": (0.01, 64.0)}
TABLE_BITS = (8, 16)
HASH_OPSET = 18


def check_range(what: str, value: float, allow_zero: bool = False) -> None:
    lo, hi = LIMITS[what]
    if allow_zero and value == 0:
        return
    if not (lo <= value <= hi) or (isinstance(value, float) and not math.isfinite(value)):
        zero = " (or 0: derived)" if allow_zero else ""
        raise UsageError(f"--grid-{what.replace('_', '-')} must be in {lo:g}..{hi:g}{zero}, got {value:g}")


def validate_options(cfg: EncodingConfig) -> None:
    """Refuse grid options out of LIMITS, naming the range."""
    check_range("levels", cfg.grid_levels)
    check_range("features", cfg.grid_features)
    check_range("finest_features", cfg.grid_finest_features, allow_zero=True)
    check_range("log2_table", cfg.grid_log2_table, allow_zero=True)
    check_range("base", cfg.grid_base)
    check_range("finest", cfg.grid_finest, allow_zero=True)
    check_range("bytes_per_pixel", float(cfg.grid_bytes_per_pixel))
    if cfg.grid_table_bits not in TABLE_BITS:
        raise UsageError(f"--grid-table-bits must be one of {', '.join(map(str, TABLE_BITS))}, got {cfg.grid_table_bits}")


def level_features(cfg: EncodingConfig) -> list[int]:
    """F per level, coarsest first: grid_features, the finest grid_finest_features when given."""
    f = [cfg.grid_features] * cfg.grid_levels
    f[-1] = cfg.grid_finest_features or cfg.grid_features
    return f


def fits_budget(cfg: EncodingConfig, entries: list[int]) -> bool:
    """Whether tables of `entries` cells per level (× that level's features, at grid_table_bits per entry) keep to
    grid_bytes_per_pixel bytes per native pixel."""
    w, h = (int(s) for s in cfg.image_size)
    values = sum(n * f for n, f in zip(entries, level_features(cfg)))
    return values * cfg.grid_table_bits / 8 <= cfg.grid_bytes_per_pixel * w * h


def validate(cfg: EncodingConfig) -> tuple[int, int]:
    """Check the grid options and the image size; return the image's (W, H)."""
    validate_options(cfg)
    w, h = (int(s) for s in cfg.image_size)
    if w < 1 or h < 1:
        raise UsageError(f"the grid encoding needs the image's size [W, H], got {list(cfg.image_size)}")
    if cfg.in_dim != 2:
        raise UsageError("the grid encoding is defined for 2D coordinates")
    return w, h


def level_sizes(cfg: EncodingConfig) -> list[tuple[int, int]]:
    """[(rx, ry)] per level, coarsest first: geometric along the longer side, the shorter in proportion."""
    w, h = validate(cfg)
    if cfg.grid_finest:
        return sizes_for(cfg, cfg.grid_finest)
    return native_ladder(cfg, w, h) or sizes_for(cfg, derived_finest(cfg, w, h))


def native_ladder(cfg: EncodingConfig, w: int, h: int) -> list[tuple[int, int]] | None:
    """With fewer features on the finest level than the others (and no table size): the finest level at the native
    pixels, the coarser ones geometric from the base to the largest top level within the budget. None when the
    features are equal, a table size is given, there is one level, or the native level alone is over the budget."""
    fine = cfg.grid_finest_features
    if not fine or fine >= cfg.grid_features or cfg.grid_log2_table or cfg.grid_levels < 2:
        return None
    side = max(w, h)

    def ladder(top: int) -> list[tuple[int, int]]:
        return sizes_for(cfg, top, levels=cfg.grid_levels - 1) + [(w, h)]

    if not fits_budget(cfg, [rx * ry for rx, ry in ladder(1)]):
        return None
    lo, hi = 1, max(1, side // 2)     # the top coarse level at most half the native size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_budget(cfg, [rx * ry for rx, ry in ladder(mid)]):
            lo = mid
        else:
            hi = mid - 1
    return ladder(lo)


def derived_finest(cfg: EncodingConfig, w: int, h: int) -> int:
    """The native longer side, or — when no table size is given either — the largest finest level (at most
    native) whose levels are all dense within grid_bytes_per_pixel bytes (at grid_table_bits per entry) per native pixel: dense
    levels train several times faster per step than hashed ones on a CPU."""
    side = max(w, h)
    if cfg.grid_log2_table:
        return side
    lo, hi = 1, side
    while lo < hi:   # the cell count grows with `finest`
        mid = (lo + hi + 1) // 2
        if fits_budget(cfg, [rx * ry for rx, ry in sizes_for(cfg, mid)]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def sizes_for(cfg: EncodingConfig, finest: int, levels: int = 0) -> list[tuple[int, int]]:
    """`levels` (default grid_levels) sizes geometric from grid_base to `finest` along the longer side."""
    w, h = (int(s) for s in cfg.image_size)
    base = min(cfg.grid_base, finest)
    n_levels = levels or cfg.grid_levels
    sizes = []
    for level in range(n_levels):
        n = finest if n_levels == 1 else base * (finest / base) ** (level / (n_levels - 1))
        n = max(1, round(n))
        short = max(1, round(n * min(w, h) / max(w, h)))
        sizes.append((n, short) if w >= h else (short, n))
    return sizes


def table_log2(cfg: EncodingConfig, sizes: list[tuple[int, int]]) -> int:
    """grid_log2_table; else, with grid_finest given, the largest T whose tables fit grid_bytes_per_pixel
    bytes per pixel; else (derived: every level dense) the smallest T that holds every level."""
    if cfg.grid_log2_table:
        return cfg.grid_log2_table
    lo, hi = LIMITS["log2_table"]
    if not cfg.grid_finest:
        return min(hi, max(lo, math.ceil(math.log2(max(rx * ry for rx, ry in sizes)))))
    best = lo
    for k in range(lo, hi + 1):
        if fits_budget(cfg, [min(rx * ry, 2 ** k) for rx, ry in sizes]):
            best = k
    return best


class MultiresGrid(nn.Module):
    """coords [N, 2] in [0,1]² → features [N, ΣF] (level l has level_features[l] features)."""

    def __init__(self, cfg: EncodingConfig):
        super().__init__()
        self.sizes = level_sizes(cfg)
        self.log2_table = table_log2(cfg, self.sizes)
        t = 2 ** self.log2_table
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

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        grid = (v * 2 - 1).reshape(1, 1, -1, 2)
        out = []
        for table, (rx, ry), dense, f in zip(self.tables, self.sizes, self.dense, self.level_features):
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
        corners = torch.stack([x0, x1, x0, x1], dim=1)                        # [N, 4]: (x0,y0) (x1,y0) (x0,y1) (x1,y1)
        rows = torch.stack([y0, y0, y1, y1], dim=1)
        idx = torch.bitwise_and(torch.bitwise_xor(corners, rows), table.shape[0] - 1)
        feats = table.index_select(0, idx.reshape(-1)).reshape(-1, 4, table.shape[1])
        weights = torch.stack([(1 - wx) * (1 - wy), wx * (1 - wy), (1 - wx) * wy, wx * wy], dim=1)
        return (feats * weights.unsqueeze(2)).sum(dim=1)
