"""`fit-image --block-size` (docs/model-repository.md, Block models): a non-square image longer than the block is
fitted as overlapping blocks, each configured for its own pixels as a fit job's pieces are, and written as one
version (the overview as model.onnx, the blocks beside it, the layout in metadata.json); bad input is one line,
exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fitstore import PRESETS
from modelrepo.blocks import BlockLayout
from tests.fits import photo

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--steps", "30", "--protocol", "full", "--no-progress"]


def fit_image(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "training", "fit-image", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("blocks-cli") / "wide.png"
    photo(100, 60, seed=2).save(path)
    return path


def test_an_image_longer_than_the_block_is_written_as_blocks_sized_for_their_own_pixels(image, tmp_path):
    out = tmp_path / "wide"
    r = fit_image(
        "--image",
        str(image),
        "--out",
        str(out),
        "--block-size",
        "40",
        "--block-overlap",
        "8",
        *FAST,
        *PRESETS["grid"]["argv"],
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "1" / "metadata.json").read_text())
    layout = BlockLayout.from_metadata(meta["blocks"])
    assert (layout.width, layout.height, layout.cols, layout.rows) == (100, 60, 3, 2)
    for b in layout.blocks:
        assert (out / "1" / b.file).is_file()
    fits = meta["block_fits"]
    assert all(fits[b.file]["encoding_size"] == [b.w, b.h] for b in layout.blocks), "grids sized for their pixels"
    assert meta["metrics"]["full_psnr"] > 20


@pytest.mark.parametrize(
    "args, words",
    [
        (["--block-size", "40"], "--block-size needs --out"),
        (["--block-size", "40", "--size", "32", "--out", "OUT"], "drop --size and --crop"),
        (["--block-size", "0", "--out", "OUT"], "--block-size"),
        (["--block-size", "40", "--block-overlap", "30", "--out", "OUT"], "--block-overlap"),
    ],
)
def test_bad_block_options_are_one_line_and_write_nothing(image, tmp_path, args, words):
    args = [str(tmp_path / "m") if a == "OUT" else a for a in args]
    r = fit_image("--image", str(image), *FAST, *args)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr
    assert not (tmp_path / "m").exists()
