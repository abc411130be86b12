"""training/regions.py: the pixels a block fit takes, cut from a tiled copy of the upload (any size and shape,
thin panoramas included) or from the file itself when it is small, equal to the file's own pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from training import regions
from training.errors import UsageError


@pytest.mark.parametrize("size", [(120, 72), (2000, 40), (40, 700)])
def test_a_region_of_the_tiled_copy_is_the_files_own_pixels(tmp_path, monkeypatch, size):
    pixels = (np.random.default_rng(1).random((size[1], size[0], 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / "up.png")
    monkeypatch.setattr(regions, "SMALL", 1)  # tile even these
    tiff = regions.tiled(tmp_path / "up.png", tmp_path / "up.tif")
    assert tiff == tmp_path / "up.tif"
    x, y, w, h = size[0] // 3, size[1] // 4, size[0] // 2, size[1] // 2
    got = np.asarray(Image.open(io.BytesIO(regions.region_png(tiff, x, y, w, h))))
    assert (got == pixels[y : y + h, x : x + w]).all()
    np.testing.assert_allclose(regions.read_region(tiff, x, y, w, h), pixels[y : y + h, x : x + w] / 255.0, atol=1e-6)


def test_a_small_image_is_read_from_the_file_and_a_bad_one_is_one_line(tmp_path):
    Image.fromarray(np.zeros((30, 50, 3), np.uint8)).save(tmp_path / "small.png")
    assert regions.tiled(tmp_path / "small.png", tmp_path / "x.tif") == tmp_path / "small.png"
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(UsageError, match="bad.png"):
        regions.image_size(tmp_path / "bad.png")
