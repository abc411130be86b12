import math

import pytest
import torch

from training.encodings import ENCODINGS, EncodingConfig, build_encoding
from training.errors import UsageError


def enc(name, **kw):
    return build_encoding(EncodingConfig(name=name, **kw))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("none", 2),
        ("basic", 4),
        ("positional", 2 * 2 * 6),
        ("gaussian", 2 * 40),
        ("sine", 40),
        ("projection", 40),
        ("grid", 8 * 2),
    ],
)
def test_each_encoding_maps_n_by_2_to_n_by_out_dim(name, expected):
    e = enc(name, features=40, levels=6, max_freq=32, bandwidth=16, image_size=[30, 20])
    y = e(torch.rand(7, 2))
    assert e.out_dim == expected
    assert y.shape == (7, expected)


def test_unknown_encoding_names_the_valid_ones():
    with pytest.raises(UsageError, match="unknown encoding 'fourier'.*basic.*gaussian.*none.*positional.*sine"):
        enc("fourier")


def test_basic_encoding_is_sin_and_cos_of_two_pi_v():
    v = torch.rand(5, 2)
    y = enc("basic")(v)
    torch.testing.assert_close(y, torch.cat([torch.sin(2 * math.pi * v), torch.cos(2 * math.pi * v)], 1))


def test_positional_encoding_uses_axis_aligned_log_linear_frequencies():
    e = enc("positional", levels=4, max_freq=8)
    expected = torch.tensor([1.0, 2.0, 4.0, 8.0])  # 8^(j/3)
    B = e.B
    assert B.shape == (2, 8)
    # Each column is axis-aligned: exactly one non-zero entry.
    assert torch.all((B != 0).sum(0) == 1)
    torch.testing.assert_close(B.abs().sum(0).reshape(4, 2)[:, 0], expected)


def test_gaussian_matrix_is_a_seeded_buffer_with_the_requested_scale():
    e = enc("gaussian", scale=10.0, features=4096, seed=3)
    assert "B" in dict(e.named_buffers()) and not list(e.parameters())
    assert abs(e.B.std().item() - 10.0) < 0.5
    torch.testing.assert_close(e.B, enc("gaussian", scale=10.0, features=4096, seed=3).B)
    v = torch.rand(3, 2)
    proj = 2 * math.pi * (v @ e.B)
    # cos is computed as sin(p + π/2) (no Concat in the graph): float32 rounds p + π/2 by up to
    # half an ulp of |p| (≤ ~300 here, ulp 3e-5), the same order as rounding p itself
    torch.testing.assert_close(e(v), torch.cat([proj.sin(), proj.cos()], 1), atol=4e-5, rtol=0)


def test_sine_features_lie_on_the_disc_and_are_sin_only():
    e = enc("sine", features=2000, bandwidth=16)
    radius = e.freqs.norm(dim=0)
    assert radius.max() <= 16 + 1e-4
    # Uniform on the disc: half the points lie inside radius R/√2.
    assert abs((radius < 16 / math.sqrt(2)).float().mean().item() - 0.5) < 0.05
    v = torch.rand(4, 2)
    torch.testing.assert_close(e(v), torch.sin(2 * math.pi * (v @ e.freqs + e.phases)))


def test_sine_damping_fades_amplitudes_toward_nyquist():
    e = enc("sine", features=500, bandwidth=32, damping=True, nyquist=32)
    radius = e.freqs.norm(dim=0)
    assert torch.all(e.amps[radius <= 16] == 1)
    assert torch.all(e.amps[radius > 16] < 1)


@pytest.mark.parametrize("name", ["basic", "positional", "gaussian"])
def test_sin_cos_kernel_depends_only_on_the_difference(name):
    e = enc(name, features=64, levels=5, max_freq=16, scale=4)
    v1 = torch.rand(50, 2, dtype=torch.float64)
    shift = torch.tensor([0.37, -0.21], dtype=torch.float64)
    e = e.double()
    k_a = (e(v1) * e(v1 + shift)).sum(1)
    k_b = (e(v1 - 0.3) * e(v1 - 0.3 + shift)).sum(1)
    torch.testing.assert_close(k_a, k_b)
    torch.testing.assert_close(k_a, torch.full_like(k_a, k_a[0].item()))
    # and it is Σ cos(2π bᵀ(v1 − v2))
    expected = torch.cos(2 * math.pi * shift @ e.B).sum()
    torch.testing.assert_close(k_a[0], expected)


def test_projection_is_the_gaussian_matrix_without_the_sines():
    v = torch.rand(6, 2)
    p, g = enc("projection", scale=7.0, features=9, seed=3), enc("gaussian", scale=7.0, features=9, seed=3)
    torch.testing.assert_close(p.B, g.B)
    torch.testing.assert_close(p(v), v @ g.B)
    torch.testing.assert_close(torch.sin(2 * math.pi * p(v)), g(v)[:, :9], atol=1e-5, rtol=0)


def test_registry_lists_all_seven_encodings():
    assert set(ENCODINGS) == {"none", "basic", "positional", "gaussian", "sine", "projection", "grid"}
