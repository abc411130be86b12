"""Tiles cover a render exactly once within the sample budget; sample grids sit at pixel centres."""

import numpy as np
import pytest

from service.render.tiling import Tile, block_mean, sample_coords, tiles


@pytest.mark.parametrize("height,width,k,budget", [(7, 5, 1, 6), (64, 64, 2, 1024), (3, 1000, 3, 100), (1, 1, 4, 16)])
def test_tiles_cover_every_pixel_once_within_the_budget(height, width, k, budget):
    seen = np.zeros((height, width), int)
    for t in tiles(height, width, k, budget):
        assert (t.y1 - t.y0) * (t.x1 - t.x0) * k * k <= budget
        seen[t.y0 : t.y1, t.x0 : t.x1] += 1
    assert np.all(seen == 1)


def test_a_pixel_needing_more_samples_than_a_tile_is_refused():
    with pytest.raises(ValueError, match="samples"):
        list(tiles(4, 4, 8, 32))


def test_samples_without_supersampling_are_pixel_centres():
    pts = sample_coords(Tile(0, 2, 0, 4), width=4, height=2, supersample=1)
    assert np.allclose(pts[..., 0], [[0.125, 0.375, 0.625, 0.875]] * 2)
    assert np.allclose(pts[:, 0, 1], [0.25, 0.75])


def test_supersamples_average_back_to_the_pixel_centre():
    pts = sample_coords(Tile(1, 3, 2, 4), width=4, height=4, supersample=3)
    centres = block_mean(pts, 3)
    assert np.allclose(centres, sample_coords(Tile(1, 3, 2, 4), width=4, height=4, supersample=1))


def test_viewport_maps_pixels_into_its_region():
    pts = sample_coords(Tile(0, 1, 0, 2), width=2, height=1, supersample=1, viewport=(0.5, 0.0, 1.0, 0.5))
    assert np.allclose(pts[0], [[0.625, 0.25], [0.875, 0.25]])


def test_block_mean_averages_k_by_k_blocks():
    a = np.arange(16, dtype=float).reshape(4, 4, 1)
    assert np.allclose(block_mean(a, 2)[..., 0], [[2.5, 4.5], [10.5, 12.5]])
