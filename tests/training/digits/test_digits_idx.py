"""The IDX reader, the dataset loader and --download against a real local HTTP server."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import threading
from functools import partial

import numpy as np
import pytest

from training.digits.idx import (
    SPLITS,
    Source,
    download_dataset,
    encode_idx,
    load_dataset,
    parse_idx,
    read_idx,
    write_idx,
)
from training.errors import UsageError


def test_write_then_read_idx_round_trips_raw_and_gzip(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        write_idx(tmp_path / name, a)
        got = read_idx(tmp_path / name)
        assert got.dtype == np.uint8 and got.shape == (2, 3, 4) and np.array_equal(got, a)
    assert (tmp_path / "a-idx3-ubyte.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_read_idx_decodes_big_endian_wider_types(tmp_path):
    a = np.array([[1.5, -2.0], [3.25, 1e6]], np.float32)
    write_idx(tmp_path / "f", a)
    assert np.array_equal(read_idx(tmp_path / "f"), a)
    assert encode_idx(a)[:4] == b"\x00\x00\x0d\x02"


def test_parse_idx_rejects_wrong_magic():
    data = encode_idx(np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(UsageError, match="not an IDX file"):
        parse_idx(b"\x12\x34" + data[2:], "x")


@pytest.mark.parametrize("cut", [2, 10, 100])
def test_parse_idx_rejects_truncated_files(cut):
    data = encode_idx(np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(UsageError, match="truncated"):
        parse_idx(data[:cut], "x")


def test_parse_idx_rejects_trailing_bytes():
    with pytest.raises(UsageError, match="after its data"):
        parse_idx(encode_idx(np.zeros(3, np.uint8)) + b"\x00", "x")


def test_read_idx_reports_a_damaged_gzip_stream(tmp_path):
    blob = gzip.compress(encode_idx(np.zeros((5, 28, 28), np.uint8)))
    (tmp_path / "d.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(UsageError, match="gzip"):
        read_idx(tmp_path / "d.gz")


def test_load_dataset_reads_raw_and_gzip_files(make_data_dir, glyphs):
    for gz in (False, True):
        data = load_dataset(make_data_dir(gz=gz))
        assert data.train.images.shape == glyphs["train"][0].shape
        assert data.train.labels.dtype == np.int64
        assert np.array_equal(data.test.labels, glyphs["test"][1])


def test_missing_data_dir_error_names_the_expected_files(tmp_path):
    with pytest.raises(UsageError) as e:
        load_dataset(tmp_path / "nowhere")
    msg = str(e.value)
    assert "does not exist" in msg and "\n" not in msg
    for stem in (s for pair in SPLITS.values() for s in pair):
        assert stem in msg


def test_mismatched_image_and_label_counts_are_rejected(make_data_dir, glyphs):
    d = make_data_dir()
    write_idx(d / SPLITS["test"][1], glyphs["test"][1][:-3])
    with pytest.raises(UsageError, match="images but .* labels"):
        load_dataset(d)


def test_label_files_with_images_swapped_in_are_rejected(make_data_dir, glyphs):
    d = make_data_dir()
    write_idx(d / SPLITS["train"][1], glyphs["train"][0])
    with pytest.raises(UsageError, match="expected uint8 labels"):
        load_dataset(d)


class Mirror:
    """A real HTTP server on a free port serving a directory."""

    def __init__(self, root):
        handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *a: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def mirror(glyph_dir):
    m = Mirror(glyph_dir)
    yield m
    m.close()


def served_source(mirror_url: str, glyph_dir, corrupt: str | None = None) -> Source:
    md5 = {
        f"{stem}.gz": hashlib.md5((glyph_dir / f"{stem}.gz").read_bytes()).hexdigest()
        for pair in SPLITS.values()
        for stem in pair
    }
    if corrupt:
        md5[corrupt] = "0" * 32
    return Source(mirrors=("http://127.0.0.1:9/", mirror_url), md5=md5)


def test_download_falls_back_to_a_working_mirror_and_verifies_checksums(tmp_path, mirror, glyph_dir, glyphs):
    target = tmp_path / "fetched"
    download_dataset("mnist", target, source=served_source(mirror.url, glyph_dir))
    assert np.array_equal(load_dataset(target).train.labels, glyphs["train"][1])


def test_download_with_a_bad_checksum_fails_and_writes_nothing(tmp_path, mirror, glyph_dir):
    target = tmp_path / "fetched"
    bad = f"{SPLITS['test'][0]}.gz"
    with pytest.raises(UsageError, match="checksum mismatch") as e:
        download_dataset("mnist", target, source=served_source(mirror.url, glyph_dir, corrupt=bad))
    assert bad in str(e.value)
    assert not target.exists()
