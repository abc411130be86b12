"""A blocked fit's pieces (training/blocks.py, `piece_steps`): the pieces of an image one model could hold share
the steps that one model would take, each making as many passes over its pixels as the fit's steps make over the
image's, so its blocks cost what one model of it would; a giant's pieces each take the steps, as photos of their
own."""

from __future__ import annotations

from modelrepo.blocks import BlockLayout
from training.blocks import piece_steps

GRID = 25_000_000
BATCH = 65_536


def total(layout: BlockLayout, steps: int = 280) -> tuple[list[int], int]:
    blocks = [piece_steps(steps, b.w * b.h, layout, GRID, BATCH) for b in layout.blocks]
    ow, oh = layout.overview
    return blocks, piece_steps(steps, ow * oh, layout, GRID, BATCH)


def test_a_photo_in_blocks_takes_the_steps_of_one_model_and_a_few_percent():
    layout = BlockLayout.plan(2560, 1600, 2048, 32)  # 2 × 1 blocks of 1312 × 1600, an overview of 640 × 400
    blocks, overview = total(layout)
    assert blocks == [144, 144] and overview == 18  # 280 × 1312/2560, 280 × 1/16
    assert 280 < sum(blocks) + overview <= 1.15 * 280


def test_a_giant_s_pieces_each_take_the_steps_as_photos_of_their_own():
    layout = BlockLayout.plan(12000, 9000, 2048, 32)  # 108 MP: more than one model may have
    blocks, overview = total(layout)
    assert set(blocks) == {280} and overview == 280


def test_pieces_smaller_than_a_batch_take_every_step_as_the_whole_image_would():
    layout = BlockLayout.plan(120, 72, 48, 12)  # 8,640 pixels: every step is a whole pass
    blocks, overview = total(layout, 80)
    assert set(blocks) == {80} and overview == 80
