"""The block layout of the model repository contract (modelrepo/blocks.py): the cores tile the image, the blend
weights add up to 1 everywhere, a box takes exactly the blocks with weight in it, and a recorded layout that is not
the plan is refused with a message naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from modelrepo import ContractError
from modelrepo.blocks import BlockLayout, axis_weights

SIZES = [(451, 300, 160, 32), (120, 72, 48, 12), (4097, 33, 4096, 32), (50, 50, 16, 4), (100, 40, 30, 0)]


@pytest.mark.parametrize("width,height,block,overlap", SIZES)
def test_the_cores_tile_the_image_and_no_block_is_longer_than_its_core_and_overlap(width, height, block, overlap):
    layout = BlockLayout.plan(width, height, block, overlap)
    xs, ys = layout.x_edges, layout.y_edges
    assert xs[0] == ys[0] == 0 and xs[-1] == width and ys[-1] == height
    assert all(b - a <= block for a, b in zip(xs, xs[1:])) and all(b - a <= block for a, b in zip(ys, ys[1:]))
    assert len(layout.blocks) == layout.cols * layout.rows
    for b in layout.blocks:
        assert 0 <= b.x and b.x + b.w <= width and 0 <= b.y and b.y + b.h <= height
        assert b.w <= block + 2 * overlap and b.h <= block + 2 * overlap


@pytest.mark.parametrize("width,height,block,overlap", SIZES)
def test_blend_weights_add_up_to_one_and_vanish_outside_each_crop(width, height, block, overlap):
    layout = BlockLayout.plan(width, height, block, overlap)
    px = np.linspace(-3, width + 3, 4 * width + 1)
    total = sum(axis_weights(layout.x_edges, overlap, c, px) for c in range(layout.cols))
    np.testing.assert_allclose(total, 1.0, atol=1e-6)
    for c in range(layout.cols):
        b = layout.at(0, c)
        w = axis_weights(layout.x_edges, overlap, c, px)
        inside = (px >= b.x) & (px <= b.x + b.w) | (c == 0) & (px < 0) | (c == layout.cols - 1) & (px > width)
        assert not w[~inside].any(), "a block has weight outside the crop it was fitted on"


def test_a_box_takes_the_blocks_with_weight_in_it_and_no_others():
    layout = BlockLayout.plan(451, 300, 160, 32)  # 3 × 2 blocks, edges at x 150, 301 and y 150
    assert [b.file for b in layout.touching(10, 10, 20, 20)] == ["blocks/r0c0.onnx"]
    assert [b.file for b in layout.touching(140, 10, 145, 20)] == ["blocks/r0c0.onnx", "blocks/r0c1.onnx"]
    assert len(layout.touching(140, 140, 160, 160)) == 4  # a corner: four blocks
    assert len(layout.touching(-1e9, -1e9, 1e9, 1e9)) == 6  # clamped to the image
    assert [b.file for b in layout.touching(-50, -50, -10, -10)] == ["blocks/r0c0.onnx"]  # outside: the edge block


def entry(**changes) -> dict:
    layout = BlockLayout.plan(451, 300, 160, 32)
    layout = layout.with_digests({b.file: f"{i:064x}" for i, b in enumerate(layout.blocks)})
    return {**layout.to_metadata(), **changes}


def test_a_recorded_layout_round_trips():
    got = BlockLayout.from_metadata(entry(), (451, 300))
    assert got.to_metadata() == entry()


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"size": [451, 301]}, "source.size"),
        ({"grid": [2, 2]}, "grid"),
        ({"block": 8}, "block size must be"),
        ({"overlap": 100}, "overlap must be"),
        ({"blend": "cosine"}, "unknown blend"),
        ({"blocks": []}, "0 blocks"),
        ({"size": "big"}, "malformed"),
    ],
)
def test_a_layout_that_is_not_the_plan_is_refused_naming_the_problem(changes, message):
    with pytest.raises(ContractError, match=message):
        BlockLayout.from_metadata(entry(**changes), (451, 300))


def test_a_block_moved_or_without_its_digest_is_refused():
    moved = entry()
    moved["blocks"][1] = {**moved["blocks"][1], "x": moved["blocks"][1]["x"] + 1}
    with pytest.raises(ContractError, match="not the plan"):
        BlockLayout.from_metadata(moved)
    bare = entry()
    del bare["blocks"][0]["sha256"]
    with pytest.raises(ContractError, match="sha256"):
        BlockLayout.from_metadata(bare)
