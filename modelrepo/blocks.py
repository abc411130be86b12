"""Block models (docs/model-repository.md, "Block models"): an image too large for one grid model is fitted as a
grid of overlapping blocks, each a grid model of its own crop, held by one version of one model.

The version's `model.onnx` is the **overview**: the whole image fitted at a reduced size (a quarter of its longer
side, at most one block's side: `overview_side`), a plain image model that Triton, KServe and every tool that reads
one ONNX file can serve. Its `metadata.json` has `blocks`, the layout with the overview's size, and
`N/blocks/rRcC.onnx` holds the blocks, each with its sha256.

Geometry, in the image's pixels (W × H; coordinates in [0,1]² as for every image model, pixel centre (j+0.5)/W):

* The image is cut into `cols` × `rows` **cores** with edges at round(k·W/cols) (and the same down the height),
  so no core is longer than `block` pixels and the cores tile the image exactly.
* A block is its core grown by `overlap` pixels on each side that has a neighbour, clipped to the image: it is
  fitted on that crop, with its own unit square over the crop.
* Across each inner edge the two blocks blend over 2·`overlap` pixels: a block's weight along x is 1 inside its
  core away from the edges, falls linearly to 0 over [edge − overlap, edge + overlap], and the weights of the
  blocks at any x add up to 1; the 2-D weight is the product of the weights along x and y. So a pixel is
  rendered by one block away from the edges, by two across an edge and by four near a corner.

This module is the contract's geometry in plain Python (no numpy): the layout, its validation against the files,
which blocks a box touches. The service blends in numpy (service/engine/blocks.py) with the same formulas.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .serving import MAX_SIDE, ContractError

BLOCK_FILE = re.compile(r"^blocks/r(\d{1,4})c(\d{1,4})\.onnx\Z")
BLEND = "linear"
MIN_BLOCK = 16  # the smallest block side a layout may ask for
MAX_BLOCKS = 65_536
OVERVIEW_SHRINK = 4  # the overview's longer side is the image's over this (1/16 of its pixels), at most a block's


def overview_side(width: int, height: int, block: int) -> int:
    """The overview's longer side: a quarter of the image's, at most `block`. Its cost beside the blocks' stays
    within 1/16 of the pixels, whatever the image (docs/fits.md, "Giant images")."""
    return max(1, min(block, math.ceil(max(width, height) / OVERVIEW_SHRINK)))


def scaled_size(width: int, height: int, side: int) -> tuple[int, int]:
    """[w, h] of the image reduced in its aspect to `side` on its longer side, never enlarged (as
    bigimage.read_scaled rounds it)."""
    longest = max(width, height)
    if side >= longest:
        return width, height
    return max(1, round(width * side / longest)), max(1, round(height * side / longest))


def block_file(row: int, col: int) -> str:
    return f"blocks/r{row}c{col}.onnx"


def edges(length: int, parts: int) -> tuple[int, ...]:
    """The cores' edges along one axis: parts + 1 integers from 0 to length."""
    return tuple(round(k * length / parts) for k in range(parts + 1))


@dataclass(frozen=True)
class Block:
    row: int
    col: int
    x: int  # the crop the block was fitted on, in the image's pixels
    y: int
    w: int
    h: int
    file: str
    sha256: str | None = None

    def to_json(self) -> dict:
        d = {"row": self.row, "col": self.col, "x": self.x, "y": self.y, "w": self.w, "h": self.h, "file": self.file}
        return d if self.sha256 is None else {**d, "sha256": self.sha256}


@dataclass(frozen=True)
class BlockLayout:
    width: int  # the whole image, in pixels
    height: int
    block: int  # the longest side of a core
    overlap: int  # pixels each block reaches past its core's inner edges
    cols: int
    rows: int
    blocks: tuple[Block, ...]  # row-major
    overview: tuple[int, int] = (0, 0)  # the overview's pixels [w, h] (plan: overview_side's; else as recorded)

    @classmethod
    def plan(cls, width: int, height: int, block: int, overlap: int) -> "BlockLayout":
        """The layout for a W×H image: ceil(W/block) × ceil(H/block) cores, each grown by `overlap`."""
        if not (MIN_BLOCK <= block <= MAX_SIDE):
            raise ContractError(f"the block size must be in {MIN_BLOCK}..{MAX_SIDE} pixels, got {block}")
        if not (0 <= overlap <= block // 4):  # a core is at least block/2 long: two ramps of 2·overlap fit in it
            raise ContractError(f"the block overlap must be in 0..{block // 4} (a quarter of the block), got {overlap}")
        if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
            raise ContractError(f"the image must be 1..{MAX_SIDE} pixels on each side, got {width}×{height}")
        cols, rows = -(-width // block), -(-height // block)
        xs, ys = edges(width, cols), edges(height, rows)
        blocks = []
        for r in range(rows):
            y0, y1 = max(0, ys[r] - overlap), min(height, ys[r + 1] + overlap)
            for c in range(cols):
                x0, x1 = max(0, xs[c] - overlap), min(width, xs[c + 1] + overlap)
                blocks.append(Block(r, c, x0, y0, x1 - x0, y1 - y0, block_file(r, c)))
        overview = scaled_size(width, height, overview_side(width, height, block))
        return cls(width, height, block, overlap, cols, rows, tuple(blocks), overview)

    @property
    def x_edges(self) -> tuple[int, ...]:
        return edges(self.width, self.cols)

    @property
    def y_edges(self) -> tuple[int, ...]:
        return edges(self.height, self.rows)

    def at(self, row: int, col: int) -> Block:
        return self.blocks[row * self.cols + col]

    def with_digests(self, digests: dict[str, str]) -> "BlockLayout":
        """The layout with each block's sha256 (by file name)."""
        return replace(self, blocks=tuple(Block(**{**b.to_json(), "sha256": digests[b.file]}) for b in self.blocks))

    def with_overview(self, size) -> "BlockLayout":
        """The layout with the overview's pixels as fitted [w, h]."""
        return replace(self, overview=(int(size[0]), int(size[1])))

    def touching(self, x0: float, y0: float, x1: float, y1: float) -> list[Block]:
        """The blocks whose weight is not zero somewhere in the pixel box [x0, x1] × [y0, y1] (clamped to the
        image): the ones a render or a query over that box needs."""
        cols = _span(self.x_edges, self.overlap, x0, x1, self.width)
        rows = _span(self.y_edges, self.overlap, y0, y1, self.height)
        return [self.at(r, c) for r in rows for c in cols]

    def to_metadata(self) -> dict:
        return {
            "size": [self.width, self.height],
            "block": self.block,
            "overlap": self.overlap,
            "grid": [self.cols, self.rows],
            "blend": BLEND,
            "overview": list(self.overview),
            "blocks": [b.to_json() for b in self.blocks],
        }

    @classmethod
    def from_metadata(cls, entry, size: tuple[int, int] | None = None) -> "BlockLayout":
        """The layout that metadata `blocks` records, checked: it must be the plan for its own size, block and
        overlap (so server and trainer agree on every crop), each block with a sha256, and the size the version's
        `source.size` when given. ContractError names what is wrong."""
        where = "metadata.json `blocks`"
        if not isinstance(entry, dict):
            raise ContractError(f"{where} must be an object, got {type(entry).__name__}")
        try:
            width, height = (int(v) for v in entry["size"])
            planned = cls.plan(width, height, int(entry["block"]), int(entry["overlap"]))
            found = [Block(**b) for b in entry["blocks"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ContractError(f"{where} is malformed ({e.__class__.__name__}: {e})") from None
        if entry.get("blend", BLEND) != BLEND:
            raise ContractError(f"{where}: unknown blend {entry.get('blend')!r}; this server knows {BLEND!r}")
        if list(entry.get("grid", [])) != [planned.cols, planned.rows]:
            raise ContractError(f"{where}: grid {entry.get('grid')} is not the plan's [{planned.cols}, {planned.rows}]")
        if size is not None and tuple(size) != (width, height):
            raise ContractError(f"{where}: size {width}×{height} is not source.size {size[0]}×{size[1]}")
        if len(found) != len(planned.blocks):
            raise ContractError(f"{where}: {len(found)} blocks, the plan has {len(planned.blocks)}")
        for want, got in zip(planned.blocks, found):
            if (got.row, got.col, got.x, got.y, got.w, got.h, got.file) != (
                want.row,
                want.col,
                want.x,
                want.y,
                want.w,
                want.h,
                want.file,
            ):
                raise ContractError(f"{where}: block {got.to_json()} is not the plan's {want.to_json()}")
            if not (isinstance(got.sha256, str) and re.fullmatch(r"[0-9a-f]{64}", got.sha256)):
                raise ContractError(f"{where}: block {got.file} needs a sha256 of 64 hex digits")
        overview = _overview(entry.get("overview"), planned, where)
        return replace(planned, blocks=tuple(found), overview=overview)


def _overview(value, planned: BlockLayout, where: str) -> tuple[int, int]:
    """The recorded overview's [w, h]; a layout written before it was recorded had its overview at the block's side."""
    if value is None:
        return scaled_size(planned.width, planned.height, planned.block)
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_SIDE for v in value)
    ):
        raise ContractError(f"{where}: overview must be [w, h], each 1..{MAX_SIDE} pixels, got {str(value)[:60]}")
    return value[0], value[1]


def axis_weights(cut: tuple[int, ...], overlap: int, k: int, px):
    """Core k's blend weights along one axis at the pixel positions `px` (a numpy array, continuous: pixel j's
    centre is j + 0.5): 1 inside the core, linear ramps of 2·overlap across its inner edges; with no overlap, 1 on
    [cut[k], cut[k+1]). The weights of all cores add up to 1 at every position."""
    import numpy as np

    px = np.asarray(px, dtype=np.float32)
    inner_lo, inner_hi = k > 0, k + 2 < len(cut)
    if overlap == 0:
        lo = cut[k] if inner_lo else -np.inf
        hi = cut[k + 1] if inner_hi else np.inf
        return ((px >= lo) & (px < hi)).astype(np.float32)
    w = np.ones_like(px)
    if inner_lo:
        w = np.minimum(w, np.clip((px - (cut[k] - overlap)) / (2 * overlap), 0, 1))
    if inner_hi:
        w = np.minimum(w, np.clip((cut[k + 1] + overlap - px) / (2 * overlap), 0, 1))
    return w


def _span(cut: tuple[int, ...], overlap: int, lo: float, hi: float, length: int) -> range:
    """The indices of the cores along one axis whose blend weight may be non-zero in [lo, hi] (closed: a box that
    ends on an edge of a block's reach takes the block too)."""
    lo, hi = min(max(lo, 0.0), float(length)), min(max(hi, 0.0), float(length))
    first = last = None
    for k in range(len(cut) - 1):
        reach0 = cut[k] - overlap if k > 0 else float("-inf")
        reach1 = cut[k + 1] + overlap if k + 2 < len(cut) else float("inf")
        if reach0 <= hi and lo <= reach1:
            first = k if first is None else first
            last = k
    return range(first, last + 1) if first is not None else range(0)
