"""The decoder of the context code (modelrepo/ctxcode.py, IRC2; docs/model-repository.md, "Coded tables"), run once
per table at a model's load: in one pass of C per channel where setup.py built it (modelrepo/_ctxcode.c), else pass
by pass by numpy with constriction's `AnsCoder`, to the same values.

The C decoder is constriction's coder rewritten, not called: constriction finds each value by a binary search over
its distribution, a third of the old decoder's time beside the contexts' numpy temporaries. It reads the stream as
constriction's default ANS does (a stack of 32-bit words, the last first; a 64-bit state; 24-bit probabilities) with
the distributions `cdf` computes as constriction quantises them, so it decodes every file constriction's coder
wrote, and `encode` (still constriction's) and `size` are unchanged.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from .codeerror import CodeError
from .ctxformat import BUCKETS, HEADER, LUT, MAGIC, MAX_SIDE, MAX_VALUES, buckets, schedule, weights

try:
    from . import _ctxcode
except ImportError:  # built without a C compiler (setup.py): numpy and constriction decode
    _ctxcode = None

PRECISION = 24  # constriction's default ANS: 24-bit probabilities, 32-bit words, a 64-bit state


def cdf(w: np.ndarray) -> np.ndarray:
    """The cumulative frequencies (uint32, n + 1 of them, the last 2^24) that constriction's `Categorical(w,
    perfect=False)` codes with, its fast quantisation: ⌊(w_0 + … + w_{i−1})·(2^24 − n)/Σw⌋ + i. Exact here, as in
    constriction: the weights are integers whose sums float64 holds exactly, and the rest is one IEEE division, one
    multiplication and a truncation."""
    cum = np.concatenate([[0.0], np.cumsum(w)])
    scale = float((1 << PRECISION) - len(w)) / float(cum[-1])
    left = (cum[:-1] * scale).astype(np.uint64) + np.arange(len(w), dtype=np.uint64)
    return np.append(left, 1 << PRECISION).astype(np.uint32)


def _models(data: bytes, at: int, end: int) -> tuple[int, np.ndarray, list[tuple[int, np.ndarray | None]], int]:
    """(centre, the group of each bucket, each group's (lo, weights, None for no distribution), where the next
    channel's model starts) of the channel whose model starts at `at`."""
    centre = data[at]
    groups = np.frombuffer(data, np.uint8, BUCKETS, at + 1)
    at += 1 + BUCKETS
    dists = []
    for _ in range(int(groups.max()) + 1):
        lo, n = struct.unpack_from("<hH", data, at)
        w = weights(np.frombuffer(data, np.uint8, n, at + 4))
        at += 4 + n
        dists.append((lo, w if w.sum() else None))
    if at > end:
        raise CodeError("a coded table whose models run past their length")
    return centre, groups, dists, at


def _start(stream: np.ndarray) -> tuple[int, int]:
    """(the words left to read, the state) of constriction's AnsCoder on `stream`: a stack, its last words first."""
    if not len(stream):
        return 0, 0
    if not stream[-1]:
        raise CodeError("a coded table whose stream ends in a zero word")
    if len(stream) == 1:
        return 0, int(stream[0])
    return len(stream) - 2, int(stream[-1]) << 32 | int(stream[-2])


def _decode_c(data: bytes, at: int, end: int, stream: np.ndarray, out: np.ndarray) -> tuple[int, bool]:
    """Each channel in one call of C (modelrepo/_ctxcode.c): (where the models end, whether the stream is spent)."""
    f = out.shape[0]
    ry, rx = HEADER.unpack_from(data)[2:4]
    passes = schedule(ry, rx)
    plan = np.zeros((len(passes), 20), np.int32)
    for i, (r0, c0, s, nbrs) in enumerate(passes):
        plan[i, :4] = r0, c0, s, len(nbrs)
        plan[i, 4 : 4 + 4 * len(nbrs)] = np.ravel(nbrs)
    pos, state = _start(stream)
    for c in range(f):
        centre, groups, dists, at = _models(data, at, end)
        kinds = np.array([0 if w is None else min(len(w), 2) for _, w in dists], np.uint8)
        cdfs = [cdf(w) if k == 2 else np.zeros(0, np.uint32) for k, (_, w) in zip(kinds, dists)]
        offsets = np.cumsum([0] + [len(x) for x in cdfs[:-1]]).astype(np.int32)
        los = np.array([lo for lo, _ in dists], np.int32)
        glut = np.append(groups[LUT], groups[0])
        pos, state = _ctxcode.decode_channel(
            stream, pos, state, plan, glut, kinds, los, offsets, np.concatenate(cdfs), centre, out[c], ry, rx
        )
    return at, pos == 0 and state == 0


def _decode_numpy(data: bytes, at: int, end: int, stream: np.ndarray, out: np.ndarray) -> tuple[int, bool]:
    """Each channel pass by pass, the contexts by numpy and the values by constriction's AnsCoder."""
    import constriction

    f = out.shape[0]
    ry, rx = HEADER.unpack_from(data)[2:4]
    _start(stream)
    coder = constriction.stream.stack.AnsCoder(stream)
    for c in range(f):
        centre, groups, dists, at = _models(data, at, end)
        models = [
            (lo, w if w is None else constriction.stream.model.Categorical(w, perfect=False) if len(w) > 1 else 1)
            for lo, w in dists
        ]
        dev = np.zeros((ry, rx), np.int32)
        for r0, c0, s, nbrs in schedule(ry, rx):
            g = groups[buckets(dev, r0, c0, s, nbrs)].ravel()
            counts = np.bincount(g, minlength=len(models))
            vals, at_value = np.empty(g.size, np.int32), 0
            for k in np.flatnonzero(counts):
                lo, model = models[k]
                if model is None:
                    raise CodeError("a coded table with values in a context that has no distribution")
                n = int(counts[k])
                vals[at_value : at_value + n] = lo if model == 1 else coder.decode(model, n) + lo
                at_value += n
            sub = np.empty(g.size, np.int32)
            sub[np.argsort(g, kind="stable")] = vals
            dev[r0::s, c0::s] = sub.reshape(dev[r0::s, c0::s].shape)
        values = dev.ravel() + centre
        if values.min() < 0 or values.max() > 255:
            raise CodeError("a coded table whose values leave 0 … 255")
        out[c] = values
    return at, coder.is_empty()


def decode(data: bytes | np.ndarray) -> np.ndarray:
    """The table [1, F, ry, rx] (uint8) of coded bytes (CodeError when they are not a whole table in this code): by
    C where it was built (modelrepo/_ctxcode.c, setup.py), else by numpy and constriction, the same values."""
    data = bytes(memoryview(np.ascontiguousarray(data)).cast("B")) if isinstance(data, np.ndarray) else data
    if len(data) < HEADER.size or data[:4] != MAGIC:
        raise CodeError("not a coded table (no IRC2 header)")
    _, f, ry, rx, crc, words, model_bytes = HEADER.unpack_from(data)
    if not (1 <= f <= 64 and 1 <= ry <= MAX_SIDE and 1 <= rx <= MAX_SIDE and f * ry * rx <= MAX_VALUES):
        raise CodeError(f"a coded table whose header names a {f}×{ry}×{rx} table")
    if HEADER.size + model_bytes + 4 * words != len(data):
        raise CodeError(f"a coded table of {len(data)} bytes whose header does not add up")
    end = HEADER.size + model_bytes
    stream = np.frombuffer(data, np.uint32, count=words, offset=end).copy()
    out = np.empty((f, ry * rx), np.uint8)
    try:
        at, empty = (_decode_numpy if _ctxcode is None else _decode_c)(data, HEADER.size, end, stream, out)
    except (ValueError, IndexError, struct.error) as e:
        if isinstance(e, CodeError):
            raise
        raise CodeError(f"a coded table that does not decode ({e})") from None
    if at != end or not empty or zlib.crc32(out) != crc:
        raise CodeError("a coded table whose stream does not decode to the table it was made of")
    return out.reshape(1, f, ry, rx)
