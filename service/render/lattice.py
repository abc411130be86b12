"""Axis-aligned renders of dense grid models on their lattice (service/engine/lattice.py): a version's own, and a
block model's blocks blended.

A render's transform keeps the axes when its matrix has no shear or rotation (m01 = m10 = 0: scales, mirrors and
translations, every IIIF tile at rotation 0): then a tile's sample columns have one model x each and its rows one
model y each, and a grid model with a lattice computes the tile's features per column and per row. Any other render
(rotated, or a model without a lattice) samples point by point as before. A lattice tile holds LATTICE_TILE_FACTOR
times `INR_RENDER_TILE_SAMPLES` samples: per sample it needs less memory than a plain tile (its ΣF features and the
head's activations, against the packed graph's gathered corners and weights), and fewer tiles cost fewer per-tile
steps; at 4 times, the heap of a server under 4 clients grew ~30 MiB above the plain path's (docs/benchmarks.md,
classic).

Where the model's lattice has the one-pass kernel (service/engine/_latticekernel.c) and the render needs nothing of
`render_tile` but the pixels (no supersamples, no background), the kernel writes a tile's pixels straight into the
image (`lattice_painter`).

A block model (service/engine/blocks.py) seen finer than its overview blends the blocks a tile touches with the
same weights as `BlockSet.predict`, per column and per row (`axis_weights`), each block on its own lattice; with the
kernel, every part of a tile inside one block's core (weights all 1) is that block's kernel's pixels, and only the
overlaps are blended.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from modelrepo.blocks import axis_weights

from ..engine.blocks import BlockedView
from .imaging import RenderSpec, Sampler, render_tile
from .tiling import Tile, grid_axes

Painter = Callable[[Tile], None]  # a tile → its pixels written into the render's image

LATTICE_TILE_FACTOR = 2
KERNEL_TILE_FACTOR = 8


def axis_aligned(spec: RenderSpec) -> bool:
    m = np.asarray(spec.matrix)
    return bool(m[0, 1] == 0 and m[1, 0] == 0)


def model_axes(spec: RenderSpec, t: Tile) -> tuple[np.ndarray, np.ndarray]:
    """The model x of a tile's sample columns and the model y of its rows, float64, as `tile_points` sums them."""
    xs, ys = grid_axes(t, spec.width, spec.height, spec.supersample, spec.viewport)
    (a, _, c), (_, e, f) = spec.matrix
    return a * xs + c, e * ys + f


def lattice_sampler(model, spec: RenderSpec) -> Sampler | None:
    """The tiles' samples on the lattice, or None when the render or the model has none."""
    if not axis_aligned(spec):
        return None
    if isinstance(model, BlockedView):
        return _blocks_sampler(model, spec)
    parts = _parts(model, spec)
    if parts is None:
        return None
    return lambda t: model.predict_lattice(parts(t))


def lattice_painter(model, spec: RenderSpec, out: np.ndarray) -> Painter | None:
    """The tiles' pixels written into `out` by the lattice kernel (service/engine/_latticekernel.c), the head and
    the pixels in one pass; None where render_tile has more to do (supersamples, a background) or the model has no
    kernel. Its tiles are KERNEL_TILE_FACTOR × `INR_RENDER_TILE_SAMPLES`: it keeps no per-sample intermediates."""
    if spec.supersample != 1 or spec.background.mode != "extrapolate" or spec.channels != 3:
        return None
    if isinstance(model, BlockedView):
        return _blocks_painter(model, spec, out) if axis_aligned(spec) else None
    lattice = getattr(model, "lattice", None)  # one read: a reload swaps the runtime, not this object
    if not axis_aligned(spec) or lattice is None or lattice.kernel is None:
        return None
    kernel = lattice.kernel
    axes = kernel.axes(lattice.axes(*model_axes(spec, Tile(0, spec.height, 0, spec.width))))
    return lambda t: model.paint_lattice(kernel, axes, t.x0, t.y0, out[t.y0 : t.y1, t.x0 : t.x1])


def _parts(model, spec: RenderSpec):
    """A tile → its slices of every level's positions of the render's sample columns and rows (worked out once)."""
    lattice = getattr(model, "lattice", None)  # one read: a reload swaps the runtime, not this object
    if lattice is None:
        return None
    k = spec.supersample
    axes = lattice.axes(*model_axes(spec, Tile(0, spec.height, 0, spec.width)))

    def parts(t: Tile) -> list:
        cols, rows = slice(t.x0 * k, t.x1 * k), slice(t.y0 * k, t.y1 * k)
        return [(x[cols], y[rows]) for x, y in axes]

    return parts


def _image_pixels(layout, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The whole image's pixels of the float32 coordinates the plain path would send (BlockSet.predict)."""
    px = xs.astype(np.float32).astype(np.float64) * layout.width
    py = ys.astype(np.float32).astype(np.float64) * layout.height
    return px, py


def _blocks_painter(view: BlockedView, spec: RenderSpec, out: np.ndarray) -> Painter | None:
    """A block model's tiles where every block the render touches has the kernel: a tile inside one block's core
    (its weights all 1) is that block's kernel's pixels, on that block's axes of the whole render (worked out on its
    first tile); a tile across a seam is cut where the blend weights change: its parts inside one core are painted
    the same way, and only the overlaps blend the blocks' rgb (`_blocks_sampler`) through render_tile."""
    blocks, layout = view.blocks, view.blocks.layout
    xs, ys = model_axes(spec, Tile(0, spec.height, 0, spec.width))
    if not all(getattr(r.lattice, "kernel", None) is not None for r in blocks.in_box(*_box(xs, ys))):
        return None
    px, py = _image_pixels(layout, xs, ys)
    sample = _blocks_sampler(view, spec)
    axes: dict[str, tuple] = {}  # a block's file → its lattice and its kernel's axes of the render

    def paint(t: Tile) -> None:
        cols, rows = slice(t.x0, t.x1), slice(t.y0, t.y1)
        touching = {(r.block.row, r.block.col): r for r in blocks.in_box(*_box(xs[cols], ys[rows]))}
        row_runs = _core_runs(blocks.y_edges, layout.overlap, {k[0] for k in touching}, py[rows], t.y0)
        col_runs = _core_runs(blocks.x_edges, layout.overlap, {k[1] for k in touching}, px[cols], t.x0)
        for y0, y1, row in row_runs:
            for x0, x1, col in col_runs:
                runtime = touching.get((row, col))
                lattice = runtime.lattice if runtime is not None else None
                if lattice is None or lattice.kernel is None:
                    sub = Tile(y0, y1, x0, x1)
                    render_tile(spec, sub, sample(sub), out)
                    continue
                b = runtime.block
                if axes.get(b.file, (None,))[0] is not lattice:
                    lx, ly = ((px - b.x) / b.w).astype(np.float32), ((py - b.y) / b.h).astype(np.float32)
                    axes[b.file] = (lattice, lattice.kernel.axes(lattice.axes(lx, ly)))
                runtime.paint_lattice(lattice.kernel, axes[b.file][1], x0, y0, out[y0:y1, x0:x1])

    return paint


def _core_runs(cut: tuple[int, ...], overlap: int, cores: set[int], px: np.ndarray, start: int) -> list:
    """Along one axis of a tile: its runs of pixels [a, b) (render pixels from `start`) with the core whose blend
    weight is 1 on all of them, or -1 for a run where two cores blend (then its samples are blended)."""
    owner = np.full(len(px), -1)
    for k in cores:
        owner[axis_weights(cut, overlap, k, px) == 1] = k
    edges = np.flatnonzero(np.diff(owner)) + 1
    bounds = [0, *edges.tolist(), len(px)]
    return [(start + a, start + b, int(owner[a])) for a, b in zip(bounds, bounds[1:])]


def _box(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float, float]:
    return float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())


def _blocks_sampler(view: BlockedView, spec: RenderSpec) -> Sampler:
    blocks = view.blocks
    layout = blocks.layout

    def sample(t: Tile) -> np.ndarray:
        xs, ys = model_axes(spec, t)
        px, py = _image_pixels(layout, xs, ys)
        out = np.zeros((len(ys), len(xs), 3), np.float32)
        for runtime in blocks.in_box(float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())):
            b = runtime.block
            wx = axis_weights(blocks.x_edges, layout.overlap, b.col, px)
            wy = axis_weights(blocks.y_edges, layout.overlap, b.row, py)
            cols, rows = np.flatnonzero(wx > 0), np.flatnonzero(wy > 0)
            if not len(cols) or not len(rows):
                continue
            c0, c1, r0, r1 = cols[0], cols[-1] + 1, rows[0], rows[-1] + 1
            lx = ((px[c0:c1] - b.x) / b.w).astype(np.float32)
            ly = ((py[r0:r1] - b.y) / b.h).astype(np.float32)
            lattice = runtime.lattice
            if lattice is not None:
                rgb = runtime.predict_lattice(lattice.axes(lx, ly))
            else:
                gx, gy = np.meshgrid(lx, ly)
                rgb = runtime.render_rgb(np.stack([gx, gy], -1).reshape(-1, 2))
            weight = wy[r0:r1, None, None] * wx[None, c0:c1, None]
            out[r0:r1, c0:c1] += weight * rgb.reshape(r1 - r0, c1 - c0, 3)
        return out.reshape(-1, 3)

    return sample
