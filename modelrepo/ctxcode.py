"""Grid tables coded by a context model and an ANS coder (constriction): the format `IRC2` (docs/model-repository.md,
"Coded tables").

The adaptive Rice code (`tablecode.py`, IRC1) spends at least one bit on a value in any block that is not all
zeros, and it sees no neighbours: at a coarse rounding most of a native level is zero with a few ±1 near edges,
where the Rice code pays about 1.5× what the values carry. This code learns per table how a value's spread
depends on its neighbours, and codes each value with the distribution of its context by asymmetric numeral
systems (constriction's `AnsCoder`, within bytes of the model's ideal length).

**The order and the contexts** (the same on both sides, so the decoder knows every context before the value):
each channel's values are taken in passes over ever finer lattices: the corner (0, 0) first, then for each
half-step h (a power of two, coarse to fine) the *centres* (i ≡ h, j ≡ h mod 2h), whose four diagonal
neighbours at distance h are known, then the *edges* (one of i, j ≡ h, the other ≡ 0 mod 2h), whose four
axis neighbours at distance h are known. A value's context is its known neighbours' mean absolute deviation
from the channel's centre (in quarter steps, an integer), put in one of `BUCKETS` by `THRESHOLDS`; bucket 0
holds the values with no known neighbour. Three quarters of the values (h = 1) see their four adjacent
neighbours, on both sides: better contexts than a raster order's causal ones, and a pass decodes as vectors.

**The model** of a channel maps each bucket to one of its distributions (`groups`, chosen by the encoder for the
fewest bytes: a small table shares one distribution among several buckets), and each distribution is a
categorical over a range of deviations with weights on a log scale (1/16 octave, `weights`): integers, so that
encoder and decoder build bit-identical probabilities on any machine (no transcendental function on either side).

The bytes: `HEADER` (magic, F, ry, rx, the CRC-32 of the table, the coded stream's length in 32-bit words), then
per channel its centre, its group of each bucket and its distributions (lo as int16, n as uint16, n weight
codes), then the ANS stream. `decode` (modelrepo/ctxdecode.py: C where setup.py built it) checks the stream ends
where its length says and the CRC of what it made.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from .codeerror import CodeError
from .ctxformat import BUCKETS, HEADER, MAGIC, MAX_SIDE, MAX_VALUES, buckets, schedule, weights
from .ctxformat import DOMAIN as DOMAIN  # the graph's DecodeTable node's domain, as callers name it

MERGES = (1, 2, 3, 4, 6, 11, 22)  # buckets per distribution the encoder tries


def code_of(counts: np.ndarray) -> np.ndarray:
    """Weight codes for symbol counts (encoder only): 255 for the most frequent, 16 codes an octave below it, at
    least 1 for a seen symbol (an 1/61,000 of the top one or rarer is weighed as that), 0 for an unseen one."""
    out = np.zeros(len(counts), np.uint8)
    seen = counts > 0
    out[seen] = np.clip(np.round(255 + 16 * np.log2(counts[seen] / counts.max())), 1, 255).astype(np.uint8)
    return out


def _contexts(dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the values in decoding order, their buckets) of one channel's deviations dev (2-D, all known: the encoder)."""
    syms, ctx = [], []
    for r0, c0, s, nbrs in schedule(*dev.shape):
        syms.append(dev[r0::s, c0::s].ravel())
        ctx.append(buckets(dev, r0, c0, s, nbrs).ravel())
    return np.concatenate(syms), np.concatenate(ctx)


def _bits(counts: np.ndarray, codes: np.ndarray | None = None) -> float:
    """Ideal bits of symbols with these counts under their own frequencies, or under the weights of `codes`."""
    seen = counts > 0
    if codes is None:
        p = counts[seen] / counts.sum()
    else:
        w = weights(codes)
        p = w[seen] / w.sum()
    return float(-(counts[seen] * np.log2(p)).sum())


def _choose_groups(hist: np.ndarray) -> np.ndarray:
    """The group of each bucket (hist: [BUCKETS, symbols] counts): adjacent used buckets merged `m` at a time, for
    the m of the fewest bytes (each distribution's range and its 4 bytes counted)."""
    used = np.flatnonzero(hist.sum(axis=1))
    best, best_groups = None, None
    for m in MERGES:
        groups = np.zeros(BUCKETS, np.uint8)
        groups[used] = np.arange(len(used)) // m
        total = 0.0
        for g in range(int(groups[used].max()) + 1):
            counts = hist[used[groups[used] == g]].sum(axis=0)
            seen = np.flatnonzero(counts)
            total += _bits(counts) / 8 + 4 + (seen[-1] - seen[0] + 1)
        if best is None or total < best:
            best, best_groups = total, groups
        if len(used) <= m:
            break
    return best_groups


def _channel(plane: np.ndarray) -> tuple[bytes, list[tuple[np.ndarray, np.ndarray]], float]:
    """(the model bytes of one channel [ry, rx] (uint8), its runs to code in decoding order: (symbols, weights),
    their ideal bits under the stored weights)."""
    centre = int(np.median(plane).round())
    dev = plane.astype(np.int32) - centre
    sym, ctx = _contexts(dev)
    low = int(sym.min())
    width = int(sym.max()) - low + 1
    hist = np.bincount(ctx * width + (sym - low), minlength=BUCKETS * width).reshape(BUCKETS, width)
    groups = _choose_groups(hist)
    models, dists, bits = bytearray(struct.pack("<B", centre) + groups.tobytes()), [], 0.0
    for g in range(int(groups.max()) + 1):
        counts = hist[groups == g].sum(axis=0)
        seen = np.flatnonzero(counts)
        lo, hi = (int(seen[0]), int(seen[-1])) if seen.size else (0, -1)
        codes = code_of(counts[lo : hi + 1])
        models += struct.pack("<hH", low + lo, len(codes)) + codes.tobytes()
        dists.append((low + lo, weights(codes)))
        if len(codes) > 1:
            bits += _bits(counts[lo : hi + 1], codes)
    runs, start = [], 0
    for r0, c0, s, _ in schedule(*plane.shape):
        n = len(range(r0, plane.shape[0], s)) * len(range(c0, plane.shape[1], s))
        g = groups[ctx[start : start + n]]
        vals = sym[start : start + n][np.argsort(g, kind="stable")]
        at = 0
        for k, count in enumerate(np.bincount(g, minlength=len(dists))):
            if count:
                lo, w = dists[k]
                runs.append((vals[at : at + count] - lo, w))
                at += int(count)
        start += n
    return bytes(models), runs, bits


def _checked(q: np.ndarray) -> np.ndarray:
    if q.dtype != np.uint8 or q.ndim != 4 or q.shape[0] != 1 or 0 in q.shape:
        raise CodeError(f"a coded table is a uint8 [1, F, ry, rx] array, got {q.dtype} {list(q.shape)}")
    _, f, ry, rx = q.shape
    if max(ry, rx) > MAX_SIDE or f * ry * rx > MAX_VALUES:
        raise CodeError(f"a table of {f}×{ry}×{rx} values is larger than this code holds")
    return q


def size(q: np.ndarray) -> int:
    """About the bytes `encode` writes for q (within ~8 + F·4 bytes: the stream's ideal length under the stored
    weights, without running the coder): what the rate control counts for each rounding it tries."""
    _checked(q)
    total = HEADER.size
    for plane in q[0]:
        models, _, bits = _channel(plane)
        total += len(models) + 4 * int(np.ceil(bits / 32))
    return total + 4


def encode(q: np.ndarray) -> bytes:
    """The coded bytes of a dense table q [1, F, ry, rx] (uint8)."""
    import constriction

    _, f, ry, rx = _checked(q).shape
    models, parts = bytearray(), []
    for plane in q[0]:
        m, runs, _ = _channel(plane)
        models += m
        parts += runs
    coder = constriction.stream.stack.AnsCoder()
    for symbols, w in reversed(parts):
        if len(w) == 1:  # one symbol: known without a bit
            continue
        coder.encode_reverse(symbols.astype(np.int32), constriction.stream.model.Categorical(w, perfect=False))
    stream = coder.get_compressed()
    crc = zlib.crc32(q.tobytes())
    return HEADER.pack(MAGIC, f, ry, rx, crc, len(stream), len(models)) + bytes(models) + stream.tobytes()


def is_coded(data: bytes) -> bool:
    return data[:4] == MAGIC


def decode(data: bytes | np.ndarray) -> np.ndarray:
    """The table [1, F, ry, rx] (uint8) of coded bytes (CodeError when they are not a whole table in this code):
    modelrepo/ctxdecode.py."""
    from .ctxdecode import decode as decode_table

    return decode_table(data)
