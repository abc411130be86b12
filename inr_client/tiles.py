"""Large renders as a grid of tiles: the plan, each tile's viewport, and a streaming PNG writer.

A W×H render of viewport [X0, Y0, X1, Y1] has pixel (i, j) centred at
(X0 + (j + 0.5)·(X1 − X0)/W, Y0 + (i + 0.5)·(Y1 − Y0)/H). The tile covering columns
[c0, c1) and rows [r0, r1) asks for the sub-viewport
[X0 + c0·dx, Y0 + r0·dy, X0 + c1·dx, Y0 + r1·dy] at (c1 − c0)×(r1 − r0) pixels, with
dx = (X1 − X0)/W and dy = (Y1 − Y0)/H, so its pixel centres are exactly those of the
big render and the stitched tiles equal one big render.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Sequence

import numpy as np

FULL = (0.0, 0.0, 1.0, 1.0)


@dataclass(frozen=True)
class Tile:
    row: int
    col: int
    x: int  # first column in the big image
    y: int  # first row in the big image
    width: int
    height: int


def plan(width: int, height: int, tile: int) -> list[list[Tile]]:
    """Tiles of at most tile×tile pixels, grouped in bands (rows of tiles), top to bottom."""
    if tile < 1:
        raise ValueError(f"tile size must be positive, got {tile}")
    bands = []
    for r, y in enumerate(range(0, height, tile)):
        h = min(tile, height - y)
        bands.append([Tile(r, c, x, y, min(tile, width - x), h) for c, x in enumerate(range(0, width, tile))])
    return bands


def tile_viewport(t: Tile, width: int, height: int, viewport: Sequence[float] | None) -> list[float]:
    x0, y0, x1, y1 = viewport if viewport is not None else FULL
    dx, dy = (x1 - x0) / width, (y1 - y0) / height
    return [x0 + t.x * dx, y0 + t.y * dy, x0 + (t.x + t.width) * dx, y0 + (t.y + t.height) * dy]


def tile_side(supersample: int, max_samples: int, tile: int) -> int:
    """The largest tile side ≤ `tile` whose samples (side² · supersample²) fit `max_samples`."""
    side = int((max_samples // max(supersample, 1) ** 2) ** 0.5)
    return max(1, min(tile, side))


def join_band(pieces: list[np.ndarray]) -> np.ndarray:
    """Tiles of one band, left to right → one [h, W, C] array (channels unified to the widest)."""
    channels = max(p.shape[2] for p in pieces)
    if channels == 4:
        pieces = [p if p.shape[2] == 4 else np.dstack([p, np.full(p.shape[:2], 255, np.uint8)]) for p in pieces]
    return np.concatenate(pieces, axis=1)


class PngWriter:
    """Writes an 8-bit RGB or RGBA PNG band by band, so only one band is ever in memory."""

    def __init__(self, out: BinaryIO, width: int, height: int, channels: int = 3, level: int = 6):
        if channels not in (3, 4):
            raise ValueError(f"PNG bands must have 3 or 4 channels, got {channels}")
        self.out, self.width, self.height, self.channels = out, width, height, channels
        self.rows = 0
        self._z = zlib.compressobj(level)
        out.write(b"\x89PNG\r\n\x1a\n")
        colour_type = 2 if channels == 3 else 6
        self._chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))

    def _chunk(self, kind: bytes, data: bytes) -> None:
        self.out.write(struct.pack(">I", len(data)) + kind + data)
        self.out.write(struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    def write(self, band: np.ndarray) -> None:
        h, w, c = band.shape
        if w != self.width or c != self.channels or self.rows + h > self.height:
            raise ValueError(
                f"band {band.shape} does not fit a {self.width}×{self.height}×{self.channels} PNG "
                f"with {self.rows} rows written"
            )
        filtered = np.zeros((h, 1 + w * c), np.uint8)  # filter type 0 (None) on every scanline
        filtered[:, 1:] = band.reshape(h, w * c)
        data = self._z.compress(filtered.tobytes())
        if data:
            self._chunk(b"IDAT", data)
        self.rows += h

    def close(self) -> None:
        if self.rows != self.height:
            raise ValueError(f"PNG has {self.rows} of {self.height} rows")
        self._chunk(b"IDAT", self._z.flush())
        self._chunk(b"IEND", b"")
