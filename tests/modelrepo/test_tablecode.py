"""Entropy-coded 8-bit tables (modelrepo/tablecode.py): every table comes back exactly, the code is smaller than the
table for the values grids hold, the code lengths `block_bits` counts are the ones written, and bytes that are not a
whole coded table are refused with CodeError, never an IndexError or a huge allocation."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from modelrepo import tablecode
from modelrepo.tablecode import HEADER, CodeError, decode, decoded, encode, layout


def laplace_table(shape, seed=0, spread=(0.3, 12.0)) -> np.ndarray:
    """Values as a grid level holds them: about one centre per channel, wide in places, flat in others."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    scale = np.repeat(rng.uniform(*spread, n // 500 + 1), 500)[:n]
    q = rng.laplace(rng.integers(40, 200), scale)
    if n >= 5:
        q[: n // 5] = np.round(q[: n // 5].mean())  # a smooth part: blocks of zeros
    return np.clip(np.round(q), 0, 255).astype(np.uint8).reshape(shape)


SHAPES = [(1, 1, 1, 1), (1, 2, 3, 5), (1, 2, 64, 64), (1, 1, 130, 77), (1, 3, 17, 200)]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_table_comes_back_exactly(shape):
    for seed in range(3):
        q = laplace_table(shape, seed)
        assert np.array_equal(decode(encode(q)), q)


EDGES = [  # tables at the edges of what a code holds (the compiled decoder's and the context code's tests too)
    np.zeros((1, 1, 40, 40), np.uint8),
    np.full((1, 2, 33, 9), 255, np.uint8),
    np.tile(np.array([0, 255], np.uint8), 800).reshape(1, 2, 20, 40),  # the widest residuals, both signs
    np.arange(256, dtype=np.uint8).repeat(9).reshape(1, 1, 48, 48),
]
EDGE_IDS = ["zeros", "full", "extremes", "ramp"]


@pytest.mark.parametrize("q", EDGES, ids=EDGE_IDS)
def test_edge_values_come_back(q):
    assert np.array_equal(decode(encode(q)), q)


def test_a_grid_like_table_codes_smaller_and_the_counted_bits_are_the_written_ones():
    q = laplace_table((1, 2, 300, 400))
    data = encode(q)
    assert len(data) < 0.75 * q.size
    centres = np.median(q.reshape(2, -1), axis=1).round().astype(np.uint8)
    bits, _ = tablecode.block_bits(tablecode.blocks_of(tablecode.zigzag(q.reshape(2, -1), centres)))
    # each section is padded to whole bytes; the header and centres come on top
    assert 0 <= len(data) - HEADER.size - 2 - bits.sum() / 8 < 2 + tablecode.KMAX


def test_decoded_puts_tables_in_place_of_their_codes_and_drops_the_decoders_constants():
    q = laplace_table((1, 2, 64, 64))
    arrays = {
        "encoding.tables.0__u8__coded": np.frombuffer(encode(q), np.uint8),
        "~1/shifts": np.arange(8, dtype=np.uint8),
        "encoding.tables.0__scale": np.ones((1, 2, 1, 1), np.float32),
        "body.0.weight": np.zeros((3, 3), np.float32),
    }
    out = decoded(arrays)
    assert sorted(out) == ["body.0.weight", "encoding.tables.0__scale", "encoding.tables.0__u8"]
    assert np.array_equal(out["encoding.tables.0__u8"], q)
    plain = {"body.0.weight": arrays["body.0.weight"]}
    assert decoded(plain) == plain


def test_bytes_that_are_not_a_whole_coded_table_are_refused():
    q = laplace_table((1, 2, 64, 64))
    data = encode(q)
    bad = [
        b"",
        b"IRC1",
        b"XXXX" + data[4:],
        data[:-1],  # a section cut short
        data + b"\0",  # trailing bytes
        data[: HEADER.size],
    ]
    fields = list(HEADER.unpack_from(data))
    for change in ({1: 10_000}, {2: 1 << 20, 3: 1 << 20}, {1: 64, 2: 65536, 3: 65536}, {4: 0}, {5: fields[5] + 1}):
        f = list(fields)
        for i, v in change.items():
            f[i] = v
        bad.append(HEADER.pack(*f) + data[HEADER.size :])
    short_unary = list(fields)
    short_unary[5 + tablecode.PARAMS + 1] = 0  # no unary stream: the values run out
    cut = layout(data).sections[1]
    bad.append(HEADER.pack(*short_unary) + data[HEADER.size : cut[0]] + data[cut[0] + cut[1] :])
    for b in bad:
        with pytest.raises(CodeError):
            decode(b)


def test_encode_refuses_what_it_cannot_code():
    for q in (np.zeros((2, 2), np.uint8), np.zeros((1, 1, 4, 4), np.int16), np.zeros((2, 1, 4, 4), np.uint8)):
        with pytest.raises(CodeError):
            encode(q)


def test_the_header_is_little_endian_and_fixed():
    assert HEADER.format.startswith("<") and struct.calcsize(HEADER.format) == HEADER.size


compiled = pytest.mark.skipif(
    tablecode._tablecode is None and os.environ.get("INR_REQUIRE_LATTICE_KERNEL") != "1",
    reason="the compiled decoder is not built in this install: `pip install -e .` (make setup) builds it where a C "
    "compiler is (setup.py); CI requires it (INR_REQUIRE_LATTICE_KERNEL=1)",
)


@compiled
@pytest.mark.parametrize("case", range(len(SHAPES) + len(EDGES)))
def test_the_compiled_decoder_gives_numpys_values(case):
    # modelrepo/_tablecode.c decodes in one pass what decode_numpy decodes with numpy (a 4 MP model's tables took
    # ~150 ms of CPU and ~100 MB of temporaries at a load)
    qs = [laplace_table(SHAPES[case], seed) for seed in range(3)] if case < len(SHAPES) else [EDGES[case - len(SHAPES)]]
    for q in qs:
        data = encode(q)
        c = decode(data)
        assert c.dtype == np.uint8 and c.flags.writeable
        assert np.array_equal(c, tablecode.decode_numpy(data, layout(data))) and np.array_equal(c, q)


@compiled
def test_flipped_bits_decode_to_a_table_or_are_refused_by_both_decoders():
    data = bytearray(encode(laplace_table((1, 2, 64, 64))))
    rng = np.random.default_rng(0)
    body = HEADER.size + 2
    for _ in range(200):
        bad = bytearray(data)
        for i in rng.integers(body, len(bad), 3):
            bad[i] ^= 1 << int(rng.integers(8))
        try:
            c = decode(bytes(bad))
        except CodeError:
            continue  # the C decoder also refuses parameters that disagree with the header's counts
        assert c.shape == (1, 2, 64, 64)
        assert np.array_equal(c, tablecode.decode_numpy(bytes(bad), layout(bytes(bad))))


def test_numpy_refuses_bytes_that_are_not_a_whole_coded_table_too(monkeypatch):
    monkeypatch.setattr(tablecode, "_tablecode", None)
    test_bytes_that_are_not_a_whole_coded_table_are_refused()
    test_every_table_comes_back_exactly(SHAPES[2])


def test_zigzag_maps_every_residual_as_documented():
    """zigzag in int16 (the encoder's memory, docs/benchmarks.md "one-model rule"): r ≥ 0 → 2r, r < 0 → −2r − 1 for
    every value and centre, so the codes are those of the int64 map they replace."""
    q = np.tile(np.arange(256, dtype=np.uint8), 256).reshape(256, 256)
    centres = np.arange(256, dtype=np.uint8)
    u = tablecode.zigzag(q, centres)
    r = q.astype(np.int64) - centres.astype(np.int64)[:, None]
    assert np.array_equal(u, np.where(r >= 0, 2 * r, -2 * r - 1)) and u.min() == 0 and u.max() == 510


@pytest.mark.parametrize("chunk", [8, 64, 4096])
def test_the_encoder_writes_the_same_bytes_a_chunk_at_a_time(monkeypatch, chunk):
    """The bit streams are written ENCODE_CHUNK values at a time (bounded memory): any chunk gives the bytes of one
    pass, and they decode to the table."""
    q = laplace_table((1, 2, 130, 77), seed=4)
    whole = encode(q)
    monkeypatch.setattr(tablecode, "ENCODE_CHUNK", chunk)
    assert encode(q) == whole and np.array_equal(decode(whole), q)
