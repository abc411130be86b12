"""The declared convention of an image network made elsewhere (modelrepo/convention.py): the service's pixel centres
mapped onto the graph's own grid, for each declared form, and the values onto rgb."""

from __future__ import annotations

import numpy as np
import pytest

from modelrepo.convention import Convention, ConventionError
from tests.modelrepo.foreign_nets import centre_grid, siren_grid

W, H = 7, 5


def mapped(c: Convention) -> np.ndarray:
    (sx, sy), (ox, oy), swap = c.coordinate_map()
    u = centre_grid(W, H).astype(np.float64)
    g = np.stack([u[:, 0] * sx + ox, u[:, 1] * sy + oy], 1)
    return g[:, ::-1] if swap else g


def test_defaults_are_the_services_own_convention():
    c = Convention.from_parameters({"task": "image"})
    assert c == Convention() and c.native is None and c.value_map() == (1.0, 0.0)
    np.testing.assert_allclose(mapped(c), centre_grid(W, H), atol=1e-7)


def test_a_siren_grid_minus_one_to_one_y_first_corners():
    c = Convention.from_parameters(
        {
            "coordinate_range": "-1,1",
            "coordinate_order": "yx",
            "pixel_grid": "corners",
            "image_width": str(W),
            "image_height": str(H),
        }
    )
    np.testing.assert_allclose(mapped(c), siren_grid(W, H), atol=1e-6)


def test_y_up_and_centres_in_a_range():
    c = Convention.from_parameters({"coordinate_range": "-2,2", "y_axis": "up"})
    g = mapped(c)
    u = centre_grid(W, H)
    np.testing.assert_allclose(g[:, 0], -2 + 4 * u[:, 0], atol=1e-6)
    np.testing.assert_allclose(g[:, 1], -2 + 4 * (1 - u[:, 1]), atol=1e-6)


def test_output_range_maps_onto_zero_one():
    scale, offset = Convention.from_parameters({"output_range": "-1,1"}).value_map()
    assert scale * -1 + offset == 0 and scale * 1 + offset == 1


def test_parameters_round_trip():
    c = Convention.from_parameters({"coordinate_range": "-1,1", "image_width": "9", "image_height": "4"})
    assert Convention.from_parameters(c.parameters()) == c


@pytest.mark.parametrize(
    "params,field",
    [
        ({"task": "digits"}, "task"),
        ({"coordinate_range": "0"}, "coordinate_range"),
        ({"coordinate_range": "1,nan"}, "coordinate_range"),
        ({"output_range": "1,1"}, "output_range"),
        ({"y_axis": "left"}, "y_axis"),
        ({"image_width": "10"}, "image_width and image_height"),
        ({"image_width": "-3", "image_height": "3"}, "image_width"),
        ({"pixel_grid": "corners", "image_width": "1", "image_height": "5"}, "pixel_grid"),
    ],
)
def test_a_convention_that_cannot_hold_names_its_parameter(params, field):
    with pytest.raises(ConventionError, match=f"parameters {field}"):
        Convention.from_parameters(params)
