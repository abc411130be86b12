"""Context-coded 8-bit tables (modelrepo/ctxcode.py, IRC2): every table comes back exactly, a table whose values
depend on their neighbours codes smaller than the Rice code, the decoding order sees only values decoded before, and
bytes that are not a whole coded table are refused with CodeError (never a wrong table, an IndexError or a huge
allocation). Each test that decodes runs on both decoders, the compiled one (modelrepo/_ctxcode.c) and numpy with
constriction's coder, which must agree bit for bit with each other and with bytes written before the first."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from modelrepo import ctxcode, ctxdecode, tablecode
from modelrepo.ctxcode import HEADER, decode, encode, schedule
from modelrepo.tablecode import CodeError
from tests.modelrepo.test_tablecode import EDGE_IDS, EDGES, SHAPES, laplace_table

FIXTURE = Path(__file__).with_name("ctxcode_irc2.npz")  # IRC2 bytes the first encoder wrote, and their table


@pytest.fixture(params=["c", "numpy"], autouse=True)
def decoder(request, monkeypatch):
    """Every test below once with each decoder: the compiled one where setup.py built it, and numpy's."""
    if request.param == "c" and ctxdecode._ctxcode is None and os.environ.get("INR_REQUIRE_LATTICE_KERNEL") != "1":
        pytest.skip("modelrepo/_ctxcode.c is not built in this install (setup.py); CI requires it")
    assert request.param == "numpy" or ctxdecode._ctxcode is not None, "modelrepo/_ctxcode.c is not built"
    if request.param == "numpy":
        monkeypatch.setattr(ctxdecode, "_ctxcode", None)
    return request.param


def textured(shape, seed=0, step=1) -> np.ndarray:
    """A native level as the rate control leaves it: zero in smooth regions, wide near edges, rounded on `step`."""
    rng = np.random.default_rng(seed)
    _, f, ry, rx = shape
    yy, xx = np.mgrid[0:ry, 0:rx]
    spread = 0.3 + 12 * (np.sin(yy / 9.0) * np.cos(xx / 13.0) > 0.6)  # textured patches, smooth elsewhere
    q = 60 + rng.laplace(0, spread[None], (f, ry, rx)) / step
    return np.clip(np.round(q), 0, 255).astype(np.uint8)[None]


@pytest.mark.parametrize("shape", SHAPES + [(1, 1, 1, 300), (1, 1, 257, 1), (1, 2, 129, 65)])
def test_every_table_comes_back_exactly(shape):
    for seed in range(3):
        q = laplace_table(shape, seed)
        assert np.array_equal(decode(encode(q)), q)


@pytest.mark.parametrize("q", EDGES, ids=EDGE_IDS)
def test_edge_values_come_back(q):
    assert np.array_equal(decode(encode(q)), q)
    assert np.array_equal(tablecode.decode(encode(q)), q)  # the one decoder the service calls reads both codes


def test_the_schedule_visits_every_cell_once_and_reads_only_cells_visited_before():
    for ry, rx in [(1, 1), (5, 3), (16, 16), (37, 100)]:
        seen = np.zeros((ry, rx), bool)
        for r0, c0, s, nbrs in schedule(ry, rx):
            here = np.zeros((ry, rx), bool)
            here[r0::s, c0::s] = True
            assert not (seen & here).any()
            rows, cols = np.nonzero(here)
            for r1, c1, dr, dc in nbrs:
                r = r1 + ((rows - r0) // s + dr) * s
                c = c1 + ((cols - c0) // s + dc) * s
                inside = (r >= 0) & (r < ry) & (c >= 0) & (c < rx)
                assert seen[r[inside], c[inside]].all()
                assert (np.abs(r - rows) <= s // 2).all() and (np.abs(c - cols) <= s // 2).all()  # neighbours
            seen |= here
        assert seen.all()


@pytest.mark.parametrize("step", [1, 4, 16])
def test_neighbours_make_the_code_smaller_than_the_rice_code(step):
    """The coarser the rounding, the more the Rice code's bit a value costs: the context code wins most there."""
    q = textured((1, 1, 300, 400), step=step)
    ours, rice = len(encode(q)), len(tablecode.encode(q))
    assert ours < rice * (0.97 if step == 1 else 0.85)


def test_the_header_counts_the_stream_and_the_crc_is_the_tables():
    q = laplace_table((1, 2, 40, 50))
    data = encode(q)
    magic, f, ry, rx, crc, words, models = HEADER.unpack_from(data)
    assert (magic, f, ry, rx) == (b"IRC2", 2, 40, 50)
    assert crc == zlib.crc32(q.reshape(2, -1).tobytes())
    assert HEADER.size + models + 4 * words == len(data)


def test_bytes_that_are_not_a_whole_coded_table_are_refused():
    q = laplace_table((1, 2, 64, 64))
    data = encode(q)
    with pytest.raises(CodeError, match="no IRC2 header"):
        decode(b"IRC1" + data[4:])
    for cut in (10, HEADER.size, len(data) - 4, len(data) - 1):
        with pytest.raises(CodeError):
            decode(data[:cut])
    huge = HEADER.pack(b"IRC2", 64, 65536, 65536, 0, 0, 0)
    with pytest.raises(CodeError, match="names a 64×65536×65536 table"):
        decode(huge)
    lying = bytearray(data)
    struct.pack_into("<I", lying, 8, 65)  # ry: the models and stream no longer describe the table
    with pytest.raises(CodeError):
        decode(bytes(lying))


def test_flipped_bits_are_refused_or_caught_by_the_crc():
    """A damaged stream or model decodes to garbage at worst, which the table's CRC refuses: never a wrong table."""
    q = textured((1, 1, 60, 70))
    data = encode(q)
    rng = np.random.default_rng(1)
    for at in rng.integers(HEADER.size, len(data), 200):
        damaged = bytearray(data)
        damaged[at] ^= 1 << int(rng.integers(8))
        try:
            back = decode(bytes(damaged))
        except CodeError:
            continue
        assert np.array_equal(back, q)  # a bit no value depends on (the unused high bits of a weight code)


def test_encode_refuses_what_it_cannot_code():
    with pytest.raises(CodeError, match="uint8"):
        encode(np.zeros((1, 1, 4, 4), np.int16))
    with pytest.raises(CodeError, match="uint8"):
        encode(np.zeros((2, 4, 4), np.uint8))


def test_weights_are_exact_integers_an_octave_apart_every_16_codes():
    w = ctxcode.weights(np.arange(256, dtype=np.uint8))
    assert w[0] == 0 and w[1] == 1024
    assert np.array_equal(w[17:], 2 * w[1:-16])
    assert (np.diff(w[1:]) > 0).all() and (w == np.round(w)).all()


def test_bytes_written_before_decode_to_the_same_table_and_encode_writes_them_again():
    """A file coded by the first IRC2 encoder (four channels: wide, mostly zeros, constant, the ends 0 and 255)."""
    with np.load(FIXTURE) as saved:
        coded, table = saved["coded"].tobytes(), saved["table"]
    assert table.shape == (1, 4, 70, 101)
    assert np.array_equal(decode(coded), table)
    assert encode(table) == coded  # the format and the encoder unchanged
    assert ctxcode.size(table) - 8 - 4 * 4 <= len(coded) <= ctxcode.size(table)


def test_a_stream_ending_in_a_zero_word_or_cut_short_is_refused():
    q = textured((1, 2, 50, 60))
    data = encode(q)
    with pytest.raises(CodeError, match="ends in a zero word"):
        decode(data[:-4] + bytes(4))
    _, f, ry, rx, crc, words, models = HEADER.unpack_from(data)
    short = HEADER.pack(b"IRC2", f, ry, rx, crc, words - 1, models) + data[HEADER.size : -4]  # the last word lost
    with pytest.raises(CodeError):
        decode(short)


def test_the_cumulative_frequencies_are_constrictions():
    """ctxdecode.cdf, which the compiled decoder codes with, against constriction's own coder: a symbol coded once on
    an empty coder leaves its interval's start as the state, twice its start and its width in the state."""
    import constriction

    def state(coder) -> int:
        return sum(int(word) << (32 * i) for i, word in enumerate(coder.get_compressed()))

    for codes in (np.array([255, 1, 0, 200, 17], np.uint8), np.arange(1, 256, dtype=np.uint8)[::-3]):
        w = ctxcode.weights(codes)
        c = ctxdecode.cdf(w).astype(np.int64)
        assert c[0] == 0 and c[-1] == 1 << ctxdecode.PRECISION and (np.diff(c) >= 1).all()
        model = constriction.stream.model.Categorical(w, perfect=False)
        for sym in range(len(w)):
            coder = constriction.stream.stack.AnsCoder()
            coder.encode_reverse(np.array([sym], np.int32), model)
            assert state(coder) == c[sym]
            coder.encode_reverse(np.array([sym], np.int32), model)
            p = c[sym + 1] - c[sym]
            assert state(coder) == (c[sym] // p) << ctxdecode.PRECISION | (c[sym] + c[sym] % p)
