"""Renders of a dense grid model on a lattice: each level's bilinear samples per column and per row, then the head.

A grid model in the dense layout (training/encodings/grid_export.py) samples every level bilinearly at each
point and runs its head (a small MLP) on the features. An axis-aligned render's samples form a lattice, columns
x_n × rows y_m, and a level's bilinear sample there is separable:

    f(y_m, x_n) = Σ_i Σ_j wy_m(i) · T[i, j] · wx_n(j)     (two weights per row and per column)

so a tile reads the level's rows that its samples touch, interpolates them once per column (`A = T[rows] · wx`,
a few table rows), then once per row (`A[i_m] + t_m · (A[i_m + 1] − A[i_m])`), written straight into the head's
input [N, ΣF] in its feature order; a level whose cells sit on the samples (the native level at scale 1) is a crop.
What is left per pixel is the head, run by onnxruntime on the graph's own nodes (lattice_graph.py). An 8-bit
table is interpolated in its codes and its scale and low applied to the few interpolated rows.

A head of Gemms with ReLU between them (every grid preset's) has a faster road where the service was built with a C
compiler: the kernel of `_latticekernel.c` (`Kernel`) does the same arithmetic for a whole tile in one pass, the
rows' interpolation, the head and the pixels in registers, with the GIL released, instead of a pass over memory per
numpy operation and per layer. Without it (no compiler at install), numpy and onnxruntime render as above.

The positions are rounded as the graph rounds them (float32 coordinates, clipped, (2x − 1) + 1 in float32, times
r/2 and − ½ in float64, to float32), so a lattice sample and the whole graph's agree to float rounding: `check`
compares them at load, and a lattice beyond PARITY is not used.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from .lattice_graph import GridLevel, head_layers, read_file

try:
    from . import _latticekernel
except ImportError:  # built without a C compiler (setup.py): numpy and onnxruntime render lattice tiles
    _latticekernel = None

log = logging.getLogger(__name__)
PARITY = 1e-5  # the export's gate (training/export.py), rgb in [0, 1]
LANES = 16  # the kernel's pixels per step; its first layer's inputs are padded to a multiple of it


def positions(coords: np.ndarray, cells) -> tuple[np.ndarray, np.ndarray]:
    """(the first cell, the weight of the next) per coordinate, for a level of `cells` along that axis: the cell
    clamped to [0, cells − 1] and the weight 0 where the next cell is clamped onto it (grid_sample's border).
    `cells` may be a sequence (one per level): then both are [levels, n], every level's in one pass."""
    v = np.clip(coords.astype(np.float32), np.float32(0), np.float32(1))
    v = v * np.float32(2) - np.float32(1) + np.float32(1)
    many = np.ndim(cells) == 1
    n = np.asarray(cells, np.intp)
    half = np.asarray(n / 2, np.float32).astype(np.float64)  # float(np.float32(cells / 2)), per level
    p = (v.astype(np.float64) * (half[:, None] if many else half) - 0.5).astype(np.float32)
    floor = np.floor(p)
    first = floor.astype(np.intp)
    top = n[:, None] - 1 if many else n - 1
    lo, hi = np.clip(first, 0, top), np.clip(first + 1, 0, top)
    return lo, np.where(hi == lo, np.float32(0), p - floor).astype(np.float32)


@dataclass(frozen=True)
class Axis:
    """A level's `positions` of a lattice's columns or rows (monotonic: the lattice is affine in its index), with
    what a tile's interpolation asks of them worked out once per render: whether the cells are consecutive (a slice
    instead of a gather) and whether any weight is not 0 (else the samples are the cells themselves: a crop)."""

    first: np.ndarray  # [n] intp
    weight: np.ndarray  # [n] float32
    after: np.ndarray  # [n] intp: the next cell, clamped
    consecutive: bool
    weighted: bool

    @classmethod
    def of(cls, coords: np.ndarray, cells: int) -> "Axis":
        return cls.each(coords, [cells])[0]

    @classmethod
    def each(cls, coords: np.ndarray, cells: list[int]) -> list["Axis"]:
        """One Axis per level of `cells` along that axis, worked out together (a render's painter makes them for
        every level at each request: one numpy pass each instead of one per level)."""
        first, weight = positions(coords, cells)
        after = np.minimum(first + 1, np.asarray(cells, np.intp)[:, None] - 1)
        n = first.shape[1]
        consecutive = (np.diff(first, axis=1) == 1).all(axis=1) if n else np.zeros(len(cells), bool)
        weighted = weight.any(axis=1)
        return [
            cls(first[k], weight[k], after[k], bool(n) and bool(consecutive[k]), bool(weighted[k]))
            for k in range(len(cells))
        ]

    def __getitem__(self, part: slice) -> "Axis":
        return Axis(self.first[part], self.weight[part], self.after[part], self.consecutive, self.weighted)

    def span(self) -> tuple[int, int]:
        """The cells the samples touch, [lo, hi)."""
        a, b = int(self.first[0]), int(self.first[-1])
        return min(a, b), max(a, b) + (2 if self.weighted else 1)

    def take(self, a: np.ndarray, axis: int, offset: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        """a's entries at the first cells (less `offset`) along `axis`: a slice or a gather."""
        if self.consecutive:
            lo = int(self.first[0]) - offset
            part = a[(slice(None),) * axis + (slice(lo, lo + len(self.first)),)]
            if out is None:
                return part
            out[...] = part
            return out
        return np.take(a, self.first - offset if offset else self.first, axis=axis, out=out)


def level_into(level: GridLevel, cols: Axis, rows: Axis, out: np.ndarray) -> None:
    """One level's features on the lattice (its columns' and rows' axes) into `out` [F, R, C] (its planes of the
    head's input)."""
    top, bottom = rows.span()
    rows_t = level.table[:, top:bottom]  # [F, k, rx]: the table rows the samples touch
    a = cols.take(rows_t, 2).astype(np.float32)  # [F, k, C]
    if cols.weighted:
        b = np.take(rows_t, cols.after, axis=2).astype(np.float32)
        b -= a
        b *= cols.weight
        a += b
    if level.scale is not None:
        a *= level.scale[:, None, None]
        a += level.low[:, None, None]
    if not rows.weighted:
        rows.take(a, 1, top, out)
        return
    step = np.zeros_like(a)
    np.subtract(a[:, 1:], a[:, :-1], out=step[:, :-1])
    g = np.take(step, rows.first - top, axis=1)
    g *= rows.weight[:, None]
    rows.take(a, 1, top, out)
    out += g


@dataclass(frozen=True)
class Kernel:
    """The one-pass kernel's arguments for a lattice (_latticekernel.c): the levels' tables, the head's layers."""

    levels: tuple  # (table, scale or None, low or None) per level
    layers: tuple  # (W [out, in], b [out]) per layer, float32; the first W's columns padded to LANES
    sigmoid: bool

    @classmethod
    def of(cls, levels: list[GridLevel], head: bytes) -> "Kernel | None":
        """The kernel of a lattice whose head it can run; None without the kernel or for another head."""
        if _latticekernel is None:
            return None
        read = head_layers(head)
        if read is None:
            return None
        layers, sigmoid = read
        w, b = layers[0]
        width = -(-w.shape[1] // LANES) * LANES
        padded = np.zeros((w.shape[0], width), np.float32)
        padded[:, : w.shape[1]] = w
        return cls(
            tuple((lv.table, lv.scale, lv.low) for lv in levels),
            ((padded, b), *layers[1:]),
            sigmoid,
        )

    @staticmethod
    def axes(axes: list[tuple[Axis, Axis]]) -> tuple:
        """A lattice's axes (`Lattice.axes`) as the kernel takes them: once per render."""
        return tuple((c.first, c.after, c.weight, r.first, r.after, r.weight) for c, r in axes)

    def tile(self, axes: tuple, x0: int, y0: int, out: np.ndarray) -> None:
        """The rgb (out float32 [R, C, 3]) or the pixels (uint8 [R, C, 3], rows of an image) of the lattice's
        (`axes`, the kernel's) columns x0 … x0 + C and rows y0 … y0 + R. A tile outside the axes is refused here
        (and again in C, with the cells' indices against the tables, before anything is read)."""
        cols, rows = len(axes[0][0]), len(axes[0][3])
        if out.ndim != 3 or not (0 <= x0 <= cols - out.shape[1] and 0 <= y0 <= rows - out.shape[0]):
            raise ValueError(f"lattice kernel: a {out.shape} tile at ({x0}, {y0}) is outside {cols} × {rows}")
        _latticekernel.tile(self.levels, self.layers, self.sigmoid, axes, x0, y0, out)


class Head:
    """The head's onnxruntime session (FEATURES [ΣF, N] → rgb [3, N]), made at its first run: a lattice with the
    kernel never runs it (the kernel runs the head), and a session made at every load cost a cold tile its making
    and each resident model its memory."""

    def __init__(self, make: Callable[[], object]):
        self._make, self._session, self._lock = make, None, threading.Lock()

    def run(self, outputs, feed: dict) -> list:
        session = self._session
        if session is None:
            with self._lock:
                if self._session is None:
                    self._session = self._make()
                session = self._session
        return session.run(outputs, feed)


@dataclass(frozen=True)
class Lattice:
    """A dense grid's levels, coarsest first (the head's feature order), the head's session, and the one-pass
    kernel where the head is one it runs."""

    levels: tuple[GridLevel, ...]
    head: Head  # FEATURES [ΣF, N] → rgb [3, N]
    kernel: Kernel | None = None

    @property
    def features(self) -> int:
        return sum(level.features for level in self.levels)

    @property
    def nbytes(self) -> int:
        return sum(level.nbytes for level in self.levels)

    def axes(self, xs: np.ndarray, ys: np.ndarray) -> list[tuple[Axis, Axis]]:
        """Each level's axes of the columns xs and the rows ys (model coordinates)."""
        cols = Axis.each(xs, [level.size[0] for level in self.levels])
        rows = Axis.each(ys, [level.size[1] for level in self.levels])
        return list(zip(cols, rows))

    def grid_features(self, axes: list[tuple]) -> np.ndarray:
        """[ΣF, R·C] float32: the features on a lattice (`axes`, or slices of them), one plane per feature, in the
        head's order."""
        cols, rows = axes[0]
        out = np.empty((self.features, len(rows.first), len(cols.first)), np.float32)
        k = 0
        for level, (cols, rows) in zip(self.levels, axes):
            level_into(level, cols, rows, out[k : k + level.features])
            k += level.features
        return out.reshape(self.features, -1)

    def run(self, features: np.ndarray) -> np.ndarray:
        """The head on features [ΣF, N] → rgb [N, 3] (a view of its [3, N] planes)."""
        return self.head.run(None, {"grid_features": features})[0].T

    def rgb(self, axes: list[tuple[Axis, Axis]]) -> np.ndarray:
        """rgb [R·C, 3] on a lattice (`axes`, or slices of them): by the kernel where there is one."""
        if self.kernel is None:
            return self.run(self.grid_features(axes))
        cols, rows = axes[0]
        out = np.empty((len(rows.first), len(cols.first), 3), np.float32)
        self.kernel.tile(self.kernel.axes(axes), 0, 0, out)
        return out.reshape(-1, 3)


def check(lattice: Lattice, whole, kernel: bool = False) -> float:
    """The largest difference of rgb between the lattice (its kernel's, or numpy's and the head session's) and the
    whole graph's session `whole` on a lattice of irregular steps over the unit square and just beyond it."""
    xs = np.sort(np.concatenate([np.linspace(-0.01, 1.01, 29), np.random.default_rng(0).random(12)]))
    ys = np.sort(np.concatenate([np.linspace(-0.01, 1.01, 17), np.random.default_rng(1).random(8)]))
    gx, gy = np.meshgrid(xs, ys)
    coords = np.stack([gx, gy], -1).reshape(-1, 2).astype(np.float32)
    exact = whole.run(["rgb"], {whole.get_inputs()[0].name: coords})[0]
    axes = lattice.axes(xs, ys)
    rgb = lattice.rgb(axes) if kernel else lattice.run(lattice.grid_features(axes))
    return float(np.max(np.abs(rgb - exact)))


def load_lattice(onnx_path: Path, make_head: Callable[[bytes], object], whole, name: str) -> Lattice | None:
    """The lattice of a version's model.onnx, its head a session made by `make_head` when it first runs (`Head`),
    checked against `whole` (the version's session): by its kernel where it has one that agrees, else by numpy and the
    head; None for another layout, or one that disagrees with the graph."""
    read = read_file(onnx_path)
    if read is None:
        return None
    levels, head = read
    lattice = Lattice(tuple(levels), Head(lambda: make_head(head)))
    kernel = Kernel.of(levels, head)
    if kernel is not None:
        fast = replace(lattice, kernel=kernel)
        diff = check(fast, whole, kernel=True)
        if diff <= PARITY:
            return fast
        # numpy and onnxruntime render it, as without the kernel, if they agree
        log.warning("model %s: the lattice kernel is off (differs from the graph by %.3g > %g)", name, diff, PARITY)
    diff = check(lattice, whole)
    if not diff <= PARITY:
        log.warning("model %s: lattice renders off (differ from the graph by %.3g > %g)", name, diff, PARITY)
        return None
    return lattice
