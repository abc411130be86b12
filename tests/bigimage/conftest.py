"""Small real images for the bigimage tests: a crop of the bundled photo (data/photos/dandelion.jpg), written by
the tests with Pillow and with libvips into each test's own folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def photo() -> np.ndarray:
    """700×500 RGB: real texture, odd tile boundaries (700 is not a multiple of 64)."""
    with Image.open(ROOT / "data" / "photos" / "dandelion.jpg") as im:
        return np.asarray(im.convert("RGB").crop((600, 300, 1300, 800))).copy()
