"""A small learnable digit data set: the glyphs 0–9 rendered with PIL's TrueType font at
random sizes (18–22 px), stroke widths, ±1 px shifts and ±8° rotations, written as MNIST-style IDX files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from training.digits.idx import SPLITS, write_idx

TRAIN_PER_CLASS = 60
TEST_PER_CLASS = 20


def render_glyphs(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [10·per_class, 28, 28] (white on black) and shuffled labels."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for digit in range(10):
        for _ in range(per_class):
            font = ImageFont.load_default(size=int(rng.integers(18, 23)))
            im = Image.new("L", (28, 28))
            ImageDraw.Draw(im).text(
                (14 + rng.integers(-1, 2), 14 + rng.integers(-1, 2)),
                str(digit),
                fill=255,
                font=font,
                anchor="mm",
                stroke_width=int(rng.integers(0, 2)),
                stroke_fill=255,
            )
            im = im.rotate(float(rng.uniform(-8, 8)), resample=Image.BILINEAR)
            images.append(np.asarray(im))
            labels.append(digit)
    order = rng.permutation(len(labels))
    return np.stack(images)[order], np.asarray(labels, np.uint8)[order]


def write_split(directory, split: str, images: np.ndarray, labels: np.ndarray, gz: bool = True) -> None:
    img_stem, lbl_stem = SPLITS[split]
    ext = ".gz" if gz else ""
    write_idx(directory / f"{img_stem}{ext}", images)
    write_idx(directory / f"{lbl_stem}{ext}", labels)


@pytest.fixture(scope="session")
def glyphs():
    """{'train': (images, labels), 'test': (images, labels)} in memory."""
    return {"train": render_glyphs(TRAIN_PER_CLASS, seed=1), "test": render_glyphs(TEST_PER_CLASS, seed=2)}


@pytest.fixture(scope="session")
def glyph_dir(tmp_path_factory, glyphs):
    """A data directory holding the glyph set as four gzipped IDX files."""
    d = tmp_path_factory.mktemp("glyphs")
    for split, (images, labels) in glyphs.items():
        write_split(d, split, images, labels)
    return d


@pytest.fixture
def make_data_dir(tmp_path, glyphs):
    """A fresh writable copy of the glyph set (raw IDX) that a test may damage."""

    def make(gz: bool = False):
        for split, (images, labels) in glyphs.items():
            write_split(tmp_path, split, images, labels, gz=gz)
        return tmp_path

    return make
