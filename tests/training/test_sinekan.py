import math

import pytest
import torch

from training.sinekan import R_A, R_C, R_K, SineKAN, SineKANLayer, phase_scale


def naive(layer: SineKANLayer, x: torch.Tensor) -> torch.Tensor:
    """y_i = Σ_{j,k} A_ijk sin(ω_k x_j + φ_jk) + b_i, as loops."""
    A, w, phi, b = layer.amplitudes, layer.frequencies, layer.phase, layer.bias
    out = torch.zeros(x.shape[0], layer.out_dim, dtype=torch.float64)
    for n in range(x.shape[0]):
        for i in range(layer.out_dim):
            s = b[i].double()
            for j in range(layer.in_dim):
                for k in range(layer.grid_size):
                    s = s + A[i, j, k].double() * math.sin(w[k].item() * x[n, j].item() + phi[j, k].item())
            out[n, i] = s
    return out


@pytest.mark.parametrize("is_first", [True, False])
def test_layer_matches_a_naive_loop_over_the_formula(is_first):
    torch.manual_seed(0)
    layer = SineKANLayer(3, 4, grid_size=5, is_first=is_first)
    with torch.no_grad():  # move off the init so every term matters
        layer.frequencies.add_(torch.randn(5) * 0.3)
        layer.amplitudes.add_(torch.randn_like(layer.amplitudes) * 0.1)
    x = torch.randn(6, 3)
    torch.testing.assert_close(layer(x).double(), naive(layer, x), atol=1e-5, rtol=1e-5)


def test_exposes_the_reference_parameter_shapes():
    layer = SineKANLayer(7, 5, grid_size=8)
    assert layer.amplitudes.shape == (5, 7, 8)
    assert layer.frequencies.shape == (8,)
    assert layer.phase.shape == (7, 8)
    assert layer.bias.shape == (5,)
    assert "phase" in dict(layer.named_buffers())
    assert {n for n, _ in layer.named_parameters()} == {"amplitudes", "frequencies", "bias"}


def test_phase_is_grid_plus_input_phase_scaled_by_the_product_of_r():
    G, d = 8, 5
    layer = SineKANLayer(d, 2, grid_size=G)
    prod = 1.0
    for n in range(1, G):
        prod *= R_A * n ** (-R_K) + R_C
    assert phase_scale(G) == pytest.approx(prod)
    for j in range(d):
        for k in range(1, G + 1):
            expected = (k / (G + 1) + math.pi * j / (d - 1)) * prod
            assert layer.phase[j, k - 1].item() == pytest.approx(expected, rel=1e-6)


def test_frequencies_start_at_k_on_the_first_layer_and_k_over_g_plus_1_later():
    G = 6
    k = torch.arange(1, G + 1, dtype=torch.float32)
    torch.testing.assert_close(SineKANLayer(2, 3, G, is_first=True).frequencies.data, k)
    torch.testing.assert_close(SineKANLayer(2, 3, G, is_first=False).frequencies.data, k / (G + 1))


def test_amplitudes_are_one_draw_per_edge_divided_by_out_dim_times_k():
    torch.manual_seed(1)
    out, G = 50, 8
    for is_first in (True, False):
        layer = SineKANLayer(200, out, G, is_first=is_first)
        k = torch.arange(1, G + 1, dtype=torch.float32)
        draw = layer.amplitudes.data * out * k  # undo the scaling: one value per (out, in)
        torch.testing.assert_close(draw, draw[:, :, :1].expand_as(draw), rtol=1e-5, atol=1e-6)
        a = draw[:, :, 0]
        if is_first:
            assert abs(a.std().item() - 0.4) < 0.02 and abs(a.mean().item()) < 0.02
        else:
            assert a.min() >= -1 and a.max() <= 1 and abs(a.std().item() - 1 / math.sqrt(3)) < 0.02


def test_bias_starts_at_one_over_out_dim():
    torch.testing.assert_close(SineKANLayer(3, 8).bias.data, torch.full((8,), 1 / 8))


def test_stack_marks_only_the_first_layer_and_keeps_leading_dims():
    net = SineKAN([2, 16, 16, 3], grid_size=4)
    assert [layer.is_first for layer in net] == [True, False, False]
    assert net(torch.rand(2, 5, 2)).shape == (2, 5, 3)


def test_first_layer_options_set_its_grid_and_scale_its_frequencies_only():
    net = SineKAN([2, 16, 16, 3], grid_size=4, first_grid=32, first_scale=2.5)
    assert net[0].grid_size == 32 and net[1].grid_size == 4
    assert torch.allclose(net[0].frequencies, 2.5 * torch.arange(1, 33, dtype=torch.float32))
    assert torch.allclose(net[1].frequencies, torch.arange(1, 5, dtype=torch.float32) / 5)


def test_image_model_first_freq_is_the_top_first_layer_frequency_in_cycles():
    from training.encodings import EncodingConfig
    from training.image_models import ImageINR, ImageModelConfig

    m = ImageINR(
        ImageModelConfig(
            model="sinekan", width=8, depth=2, first_grid=64, first_freq=16.0, encoding=EncodingConfig(name="none")
        )
    )
    assert m.body[0].frequencies[-1].item() == pytest.approx(2 * math.pi * 16)


@pytest.mark.parametrize("is_first", [True, False])
def test_scaled_init_gives_unit_output_variance_and_keeps_the_one_over_k_shape(is_first):
    torch.manual_seed(0)
    layer = SineKANLayer(256, 512, grid_size=8, is_first=is_first, init="scaled")
    x = torch.rand(4096, 256) * 2 - 1
    with torch.no_grad():
        y = layer(x)
    assert 0.5 < float((y - layer.bias).pow(2).mean()) < 2.5  # order one over the draw; the paper: ~1e-4
    a = layer.amplitudes
    assert torch.allclose(a[..., 1] * 2, a[..., 0]) and torch.allclose(a[..., 7] * 8, a[..., 0])
