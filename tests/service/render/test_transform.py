"""Transform maths: the parameter form, its exact inverse, and the matrix form."""

import numpy as np
import pytest

from service.geometry import transform as tf


def test_identity_parameters_give_the_identity_sampling_matrix():
    assert tf.is_identity(tf.sampling_matrix())


def test_rotating_90_degrees_turns_right_into_up_on_a_y_down_screen():
    # counter-clockwise on screen: a point right of the centre moves above it (smaller y)
    f = tf.forward(rotate=90)
    assert np.allclose(f @ [1.0, 0.5, 1.0], [0.5, 0.0, 1.0])


def test_rotation_by_a_multiple_of_90_degrees_is_exact():
    assert np.array_equal(tf.rotation(90)[:2, :2], [[0.0, 1.0], [-1.0, 0.0]])
    assert np.array_equal(tf.rotation(180)[:2, :2], [[-1.0, 0.0], [0.0, -1.0]])


def test_sampling_matrix_inverts_the_forward_map():
    params = dict(rotate=33.0, scale=(1.7, -0.6), translate=(0.2, -0.1), center=(0.3, 0.6))
    pts = np.random.default_rng(0).random((50, 2))
    moved = tf.apply(tf.forward(**params)[:2], pts)
    assert np.allclose(tf.apply(tf.sampling_matrix(**params), moved), pts)


def test_order_is_rotate_then_scale_then_translate():
    f = tf.forward(rotate=90, scale=(2.0, 1.0), translate=(0.1, 0.0), center=(0.0, 0.0))
    # (1, 0) → rotate → (0, −1) → scale x by 2 leaves it → translate → (0.1, −1)
    assert np.allclose(f @ [1.0, 0.0, 1.0], [0.1, -1.0, 1.0])


def test_scaling_keeps_the_center_fixed():
    f = tf.forward(scale=(3.0, 0.5), center=(0.25, 0.75))
    assert np.allclose(f @ [0.25, 0.75, 1.0], [0.25, 0.75, 1.0])


def test_matrix_form_is_applied_directly_to_query_coordinates():
    m = [[2.0, 0.0, 0.1], [0.0, 1.0, -0.2]]
    assert np.allclose(tf.apply(tf.sampling_matrix(matrix=m), np.array([[0.5, 0.5]])), [[1.1, 0.3]])


def test_zero_scale_is_refused():
    with pytest.raises(ValueError, match="non-zero"):
        tf.sampling_matrix(scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="between"):
        tf.sampling_matrix(scale=(1.0, 1e-300))
