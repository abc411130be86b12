"""Entropy-coded 8-bit grid tables: the format both sides of the repository read (docs/model-repository.md,
"Coded tables").

A grid model's file is almost all its 8-bit tables (`NAME__u8`, [1, F, ry, rx] uint8, training/encodings/grid_quant.py),
and their values are far from uniform: each feature channel of a level clusters around one value, more tightly in
smooth parts of the image than in textured ones. So a table is stored as an adaptive Rice code, one parameter per
block of values, in one uint8 initializer `NAME__u8__coded`, and the graph holds, in front of its old users, standard
ONNX nodes that decode it back to `NAME__u8` (training/encodings/grid_code.py). Every input of those nodes is an
initializer, so onnxruntime runs them once, when it makes the session (constant folding, as it already packs the
corner cells), and what a session holds is the graph of an uncoded file, value for value. Any onnxruntime, Triton's
included, loads the file as it is.

The code of one table, chosen so that a fixed graph of vector operations decodes it (no loop over values):

  - each channel's values q (uint8) minus the channel's centre c (its median), zigzagged to u ≥ 0
    (r ≥ 0 → 2r, r < 0 → −2r − 1), padded with zeros to a whole number of blocks of BLOCK values, in raster order;
  - each block has a parameter p: 0 when all its u are 0 (the block costs nothing but p), else p = k + 1 with k the
    Rice parameter of the block (0 … KMAX), whichever codes it in the fewest bits;
  - the blocks are taken in the stable order of p (`order`); in that order, for the blocks with p > 0, the high
    parts u >> k of all values in unary (that many 0 bits, then a 1), one bit stream; then for each k ≥ 1 the low
    k bits of the values of the blocks with that k, one fixed-width bit stream per k, most significant bit first.

The bytes of `NAME__u8__coded`: the header (`HEADER`: magic, the table's shape, BLOCK, the number of blocks per p,
the length of each section), the centres (F bytes), then the sections: the parameters, 4 bits each, the unary stream,
and the low-bit streams for k = 1 … KMAX. `decode` reads it back with numpy; `encode` writes it; `block_bits` is the
code length the fit's rate term counts (training/encodings/grid_rate.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .codeerror import CodeError

try:
    from . import _tablecode
except ImportError:  # built without a C compiler (setup.py): numpy decodes
    _tablecode = None

MAGIC = b"IRC1"
BLOCK = 64  # values per block: the parameters cost 4 bits per 64 values
KMAX = 8  # u ≤ 510: with k = 8 the unary part is at most 1
PARAMS = KMAX + 2  # p = 0 (a zero block) and p = k + 1 for k in 0 … KMAX
SUFFIX = "__coded"  # NAME__u8 is stored as NAME__u8__coded
PREFIX = "~"  # the decoding nodes' outputs and their constants are named ~N/… (N numbers the coded tables)
MAX_SIDE = 65_536  # the largest side of a table this reads
MAX_VALUES = 1 << 28  # and the most values (a 64 MP native level has 2^26)
ENCODE_CHUNK = 1 << 20  # values per pass of the encoder's bit streams (a multiple of 8)
# magic, then F, ry, rx, BLOCK, blocks per p (PARAMS), and the lengths of the sections: parameters, unary, and the
# low bits of k = 1 … KMAX
HEADER = struct.Struct(f"<4s4I{PARAMS}I{2 + KMAX}I")


@dataclass(frozen=True)
class Layout:
    """Where everything is in a coded table's bytes (the decoding graph slices them at these offsets)."""

    shape: tuple[int, int, int, int]  # [1, F, ry, rx]
    block: int
    counts: tuple[int, ...]  # blocks per parameter p = 0 … PARAMS − 1
    sections: tuple[tuple[int, int], ...]  # (offset, length) of: parameters, unary, low bits k = 1 … KMAX
    centres: tuple[int, ...]  # per channel

    @property
    def channel_blocks(self) -> int:
        _, _, ry, rx = self.shape
        return -(-ry * rx // self.block)

    @property
    def blocks(self) -> int:
        return self.shape[1] * self.channel_blocks

    @property
    def values(self) -> int:
        """Values the unary stream codes: those of the blocks with p > 0."""
        return (self.blocks - self.counts[0]) * self.block


def zigzag(q: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """u ≥ 0 of q [F, n] (uint8) about each channel's centre, int16 (u ≤ 510): r ≥ 0 → 2r, r < 0 → −2r − 1, as
    (r << 1) ^ (r >> 15). Two bytes a value, where int64 took eight in each of the encoder's temporaries (a 12 MP
    native level's encode held ~600 MiB, docs/benchmarks.md "one-model rule")."""
    r = q.astype(np.int16) - centres.astype(np.int16)[:, None]
    return (r << 1) ^ (r >> 15)


def blocks_of(u: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """u [F, n] → [F·blocks, block], each channel padded with zeros to whole blocks."""
    f, n = u.shape
    pad = -n % block
    return np.pad(u, ((0, 0), (0, pad))).reshape(f * ((n + pad) // block), block)


def block_bits(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bits, p) of each block of u [blocks, block]: the fewest bits any Rice parameter codes it in (plus the 4 bits of
    p), p = k + 1 for that k, or p = 0 and 4 bits for a block of zeros."""
    width = u.shape[1]
    best = np.full(len(u), np.iinfo(np.int64).max, np.int64)
    param = np.zeros(len(u), np.int64)
    for k in range(KMAX + 1):
        bits = (u >> k).sum(axis=1) + width * (k + 1)
        better = bits < best
        best[better], param[better] = bits[better], k + 1
    zero = ~u.any(axis=1)
    best[zero], param[zero] = 0, 0
    return best + 4, param


def _bits_msb(values: np.ndarray, k: int) -> np.ndarray:
    """The low k bits of each value, most significant first, as packed bytes; ENCODE_CHUNK values at a time (a
    multiple of 8: each chunk's bits end on a byte)."""
    shifts = np.arange(k - 1, -1, -1, dtype=values.dtype)
    parts = [
        np.packbits(((values[i : i + ENCODE_CHUNK, None] >> shifts) & 1).astype(np.uint8).ravel())
        for i in range(0, len(values), ENCODE_CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def _unary(high: np.ndarray) -> np.ndarray:
    """The unary stream of `high` (each value h: h zero bits, then a one), one uint8 0/1 per bit; its ends counted
    ENCODE_CHUNK values at a time (int64 positions of a chunk, not of every value)."""
    unary = np.zeros(int(high.sum()) + high.size, np.uint8)
    at = 0
    for i in range(0, len(high), ENCODE_CHUNK):
        ends = np.cumsum(high[i : i + ENCODE_CHUNK] + 1)
        unary[ends + (at - 1)] = 1
        at += int(ends[-1])
    return unary


def encode(q: np.ndarray) -> bytes:
    """The coded bytes of a dense table q [1, F, ry, rx] (uint8)."""
    if q.dtype != np.uint8 or q.ndim != 4 or q.shape[0] != 1 or 0 in q.shape:
        raise CodeError(f"a coded table is a uint8 [1, F, ry, rx] array, got {q.dtype} {list(q.shape)}")
    _, f, ry, rx = q.shape
    flat = q.reshape(f, ry * rx)
    centres = np.median(flat, axis=1).round().astype(np.uint8)
    u = blocks_of(zigzag(flat, centres))
    _, param = block_bits(u)
    order = np.argsort(param, kind="stable")
    counts = np.bincount(param, minlength=PARAMS)
    us, ps = u[order], param[order]
    del u
    coded, ks = us[ps > 0], ps[ps > 0] - 1
    del us
    unary = _unary((coded >> ks.astype(coded.dtype)[:, None]).ravel())
    lows = [_bits_msb(coded[ks == k].ravel(), k) for k in range(1, KMAX + 1)]
    params = np.packbits(((param[:, None] >> np.arange(3, -1, -1)) & 1).astype(np.uint8).ravel())
    sections = [params.tobytes(), np.packbits(unary).tobytes(), *(low.tobytes() for low in lows)]
    header = HEADER.pack(MAGIC, f, ry, rx, BLOCK, *counts.tolist(), *(len(s) for s in sections))
    return header + centres.tobytes() + b"".join(sections)


def layout(data: bytes | np.ndarray) -> Layout:
    """The layout of coded bytes (CodeError when they are not whole)."""
    data = bytes(memoryview(np.ascontiguousarray(data)).cast("B")) if isinstance(data, np.ndarray) else data
    if len(data) < HEADER.size or data[:4] != MAGIC:
        raise CodeError("not a coded table (no IRC1 header)")
    fields = HEADER.unpack_from(data)
    f, ry, rx, block = fields[1:5]
    counts = fields[5 : 5 + PARAMS]
    lengths = fields[5 + PARAMS :]
    offset = HEADER.size + f
    sections = []
    for length in lengths:
        sections.append((offset, length))
        offset += length
    out = Layout((1, f, ry, rx), block, tuple(counts), tuple(sections), tuple(data[HEADER.size : HEADER.size + f]))
    too_big = max(ry, rx) > MAX_SIDE or f > 64 or block > 4096 or f * ry * rx > MAX_VALUES
    if offset != len(data) or min(f, ry, rx, block) < 1 or too_big:
        raise CodeError(f"a coded table of {len(data)} bytes whose header does not add up")
    need = [out.blocks * 4, 0] + [counts[k + 1] * block * k for k in range(1, KMAX + 1)]  # bits of each section
    if sum(counts) != out.blocks or any(length * 8 < bits for (_, length), bits in zip(sections, need)):
        raise CodeError(f"a coded table of {len(data)} bytes whose sections are shorter than its header says")
    return out


def decode(data: bytes | np.ndarray) -> np.ndarray:
    """The table [1, F, ry, rx] (uint8) of coded bytes: what the graph's decoding nodes compute. In one pass of C
    where it was built (modelrepo/_tablecode.c, setup.py), else by numpy (`decode_numpy`). A table in the context
    code (`IRC2`, modelrepo/ctxcode.py) is decoded by that code."""
    data = bytes(memoryview(np.ascontiguousarray(data)).cast("B")) if isinstance(data, np.ndarray) else data
    if data[:4] == b"IRC2":
        from . import ctxcode

        return ctxcode.decode(data)
    lay = layout(data)
    if _tablecode is None:
        return decode_numpy(data, lay)
    _, f, ry, rx = lay.shape
    try:
        values = _tablecode.decode(
            data, [x for s in lay.sections for x in s], lay.counts, lay.block, f, ry, rx, bytes(lay.centres)
        )
    except ValueError as e:
        raise CodeError(str(e)) from None
    return np.frombuffer(values, np.uint8).reshape(lay.shape)


def decode_numpy(data: bytes, lay: Layout) -> np.ndarray:
    """`decode` by numpy: a pass over memory per operation, with int32 and int64 temporaries per value."""
    raw = np.frombuffer(data, np.uint8)

    def section(i: int) -> np.ndarray:
        start, length = lay.sections[i]
        return raw[start : start + length]

    params = _fields(section(0), lay.blocks, 4)
    ends = np.flatnonzero(np.unpackbits(section(1)))[: lay.values]
    if len(ends) != lay.values:
        raise CodeError("a coded table whose unary stream is short")
    high = np.diff(ends.astype(np.int32), prepend=np.int32(-1)) - 1
    u = np.zeros((lay.blocks, lay.block), np.int32)
    rows = np.argsort(params, kind="stable")[lay.counts[0] :]  # the blocks with p > 0, in stream order
    start = 0
    for p in range(1, PARAMS):
        n, k = lay.counts[p] * lay.block, p - 1
        if not n:
            continue
        part = high[start : start + n]
        if k:
            part = (part << k) | _fields(section(1 + k), n, k)
        u[rows[start // lay.block : (start + n) // lay.block]] = part.reshape(-1, lay.block)
        start += n
    _, f, ry, rx = lay.shape
    u = u.reshape(f, -1)[:, : ry * rx]
    r = (u >> 1) ^ -(u & 1)  # the zigzag undone
    return (r + np.array(lay.centres, np.int32)[:, None]).astype(np.uint8).reshape(lay.shape)


def _fields(packed: np.ndarray, count: int, width: int) -> np.ndarray:
    """`count` fields of `width` ≤ 8 bits, most significant first, from packed bytes: int32."""
    if width == 8:
        return packed[:count].astype(np.int32)
    bits = np.unpackbits(packed)[: count * width].reshape(count, width)
    wide = np.zeros((count, 8), np.uint8)
    wide[:, 8 - width :] = bits
    return np.packbits(wide.reshape(-1)).astype(np.int32)


def decoded(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A graph's initializers by name with each coded table `NAME__u8__coded` replaced by its table `NAME__u8`, and
    the constants of the decoding nodes (`~N/…`) left out: the initializers of the uncoded file."""
    tables = {name.removesuffix(SUFFIX): decode(a) for name, a in arrays.items() if name.endswith(SUFFIX)}
    if not tables:
        return arrays
    kept = {k: a for k, a in arrays.items() if not k.endswith(SUFFIX) and not k.startswith(PREFIX)}
    return {**kept, **tables}
