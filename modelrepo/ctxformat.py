"""The context code's format (`IRC2`, modelrepo/ctxcode.py): what its encoder and its decoder (ctxdecode.py) share —
the header, the contexts' buckets, the weight codes and the order of the passes."""

from __future__ import annotations

import struct

import numpy as np

MAGIC = b"IRC2"
DOMAIN = "ai.inr-serve"  # the domain of the graph's DecodeTable node, which the service replaces by the table
HEADER = struct.Struct("<4s3IIII")  # magic, F, ry, rx, crc32, stream words, model bytes
THRESHOLDS = np.array([1, 2, 3, 4, 6, 8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, 724, 1024], np.int64)
BUCKETS = len(THRESHOLDS) + 2  # 0: no known neighbour; 1 … 21 by activity
# 2^(i/16)·1024, rounded: a weight code c ≥ 1 weighs ROOTS[(c − 1) % 16] << ((c − 1) // 16); 0 weighs nothing
ROOTS = np.array(
    [1024, 1069, 1116, 1165, 1217, 1270, 1326, 1385, 1448, 1510, 1576, 1646, 1722, 1797, 1875, 1958], np.int64
)
MAX_SIDE = 65_536
MAX_VALUES = 1 << 28


def weights(codes: np.ndarray) -> np.ndarray:
    """float64 weights of weight codes (uint8): exact integers below 2^53, the same on every machine."""
    c = codes.astype(np.int64)
    w = ROOTS[np.maximum(c - 1, 0) % 16] << (np.maximum(c - 1, 0) // 16)
    return np.where(c > 0, w, 0).astype(np.float64)


LUT = 1 + np.searchsorted(THRESHOLDS, np.arange(4 * 255 + 1), side="right")  # bucket of each activity


def schedule(ry: int, rx: int) -> list[tuple[int, int, int, list[tuple[int, int, int, int]]]]:
    """The passes of a ry × rx table, each a regular sub-lattice (r0, c0, s): the values at (r0 + r·s, c0 + c·s), with
    the neighbours they see, each (r1, c1, dr, dc): the value at (r1 + (r + dr)·s, c1 + (c + dc)·s), known before."""
    side = 1
    while side < max(ry, rx):
        side *= 2
    out = [(0, 0, 2 * side, [])]
    h = side // 2
    while h >= 1:
        s = 2 * h
        out.append((h, h, s, [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1)]))
        out.append((0, h, s, [(0, 0, 0, 0), (0, 0, 0, 1), (h, h, -1, 0), (h, h, 0, 0)]))
        out.append((h, 0, s, [(0, 0, 0, 0), (0, 0, 1, 0), (h, h, 0, -1), (h, h, 0, 0)]))
        h //= 2
    return [p for p in out if p[0] < ry and p[1] < rx]


def buckets(dev: np.ndarray, r0: int, c0: int, s: int, nbrs: list[tuple[int, int, int, int]]) -> np.ndarray:
    """The bucket of each value of the sub-lattice (r0, c0, s) of `dev` (2-D, int32), from its known neighbours
    `nbrs` (those inside the table)."""
    shape = dev[r0::s, c0::s].shape
    if not nbrs:
        return np.zeros(shape, np.int64)
    total = np.zeros(shape, np.int32)
    count = np.zeros(shape, np.int32)
    for r1, c1, dr, dc in nbrs:
        known = dev[r1::s, c1::s]
        rows = slice(max(0, -dr), min(shape[0], known.shape[0] - dr))
        cols = slice(max(0, -dc), min(shape[1], known.shape[1] - dc))
        if rows.start >= rows.stop or cols.start >= cols.stop:
            continue
        part = known[rows.start + dr : rows.stop + dr, cols.start + dc : cols.stop + dc]
        total[rows, cols] += np.abs(part)
        count[rows, cols] += 1
    activity = (4 * total) // np.maximum(count, 1)
    return np.where(count > 0, LUT[np.minimum(activity, len(LUT) - 1)], 0)
