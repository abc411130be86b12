"""One model or blocks (training/worker/memory.py, training/worker/pieces.py `plan`, docs/fits.md): an upload a
worker can hold as one model is one model, whatever its side; blocks are for the ones it cannot hold (of a side
that it can), or for a job that asks for them; a job with a size cap is fitted whole."""

from __future__ import annotations

import pytest
import pyvips

from training.errors import UsageError
from training.worker import memory as sizing
from training.worker.pieces import plan

GRID = 25_000_000  # the grid preset's max_pixels: the largest one model at native size
OPTIONS = {"block": 2048, "overlap": 32, "blocks": "auto", "size": None}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Uniform PNGs of the sizes a camera makes: only their headers are read."""
    folder = tmp_path_factory.mktemp("sizes")
    out = {}
    for w, h in ((2560, 1600), (4800, 3200), (6000, 4000), (12000, 9000)):
        out[(w, h)] = folder / f"{w}x{h}.png"
        pyvips.Image.black(w, h, bands=3).pngsave(str(out[(w, h)]), compression=1)
    return out


def test_the_bound_grows_in_a_line_and_its_inverse_is_the_pixels_one_model_may_have():
    assert sizing.one_model_peak(0) == sizing.BASE
    assert sizing.one_model_peak(10**6) - sizing.one_model_peak(0) == sizing.PER_PIXEL * 10**6
    for memory in (sizing.GiB, sizing.DEFAULT, 3 * sizing.GiB):
        pixels = sizing.one_model_pixels(memory)
        assert sizing.one_model_peak(pixels) <= memory < sizing.one_model_peak(pixels + 1)
    assert sizing.one_model_pixels(sizing.BASE // 2) == 0 and sizing.block_side(sizing.BASE // 2, 32) == 0
    side = sizing.block_side(sizing.DEFAULT, 32)
    assert sizing.one_model_peak((side + 64) ** 2) <= sizing.DEFAULT < sizing.one_model_peak((side + 65) ** 2)


def test_a_4mp_photo_is_one_model_in_a_2gib_worker_and_blocks_only_when_asked(images):
    photo = images[(2560, 1600)]
    assert plan("j", OPTIONS, photo, sizing.DEFAULT, GRID) is None
    asked = plan("j", {**OPTIONS, "blocks": "always"}, photo, sizing.DEFAULT, GRID)
    assert (asked.cols, asked.rows, asked.block) == (2, 1, 2048)
    assert asked.overview == (640, 400), "the overview: a quarter of the image's side"
    assert plan("j", {**OPTIONS, "blocks": "always", "size": 1000}, photo, sizing.DEFAULT, GRID) is None
    assert plan("j", {**OPTIONS, "blocks": "always", "block": 4096}, photo, sizing.DEFAULT, GRID) is None


def test_the_memory_decides_not_the_side(images):
    photo = images[(4800, 3200)]  # 15.4 MP
    big = sizing.one_model_peak(4800 * 3200)
    assert plan("j", OPTIONS, photo, big, GRID) is None, "a worker that holds it fits one model"
    small = plan("j", OPTIONS, photo, big - 1, GRID)
    assert small is not None and small.block == 2048 and (small.cols, small.rows) == (3, 2)
    assert small.overview == (1200, 800)
    tight = sizing.one_model_peak(1000**2)  # blocks of a side this worker can hold, overlap included
    layout = plan("j", OPTIONS, photo, tight, GRID)
    assert layout.block == sizing.block_side(tight, 32) and all(b.w * b.h <= 1000**2 for b in layout.blocks)


def test_a_photo_past_the_dense_layout_is_blocks_in_a_worker_that_would_hold_it(images):
    """24 MP: its native level's cells are past what the dense graph indexes (grid_export.MAX_CELLS), so one model
    would keep the traced graph: blocks of the dense layout instead, whose tiles the service's kernel paints."""
    photo = images[(6000, 4000)]
    layout = plan("j", OPTIONS, photo, 64 * sizing.GiB, GRID)
    assert layout is not None and layout.block == 2048 and (layout.cols, layout.rows) == (3, 2)
    assert layout.overview == (1500, 1000)


def test_a_giant_is_blocks_whatever_the_memory_and_a_worker_too_small_for_a_block_says_so(images):
    giant = images[(12000, 9000)]
    layout = plan("j", OPTIONS, giant, 64 * sizing.GiB, GRID)  # over the preset's largest one model
    assert (layout.cols, layout.rows, layout.overlap) == (6, 5, 32) and layout.overview == (2048, 1536)
    with pytest.raises(UsageError, match=r"needs .* MiB, more than this worker's memory .*INR_FIT_WORKER_MEMORY"):
        plan("j", OPTIONS, giant, sizing.BASE, GRID)
