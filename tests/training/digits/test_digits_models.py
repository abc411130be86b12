"""The four digit models: shapes, gradient flow, the B-spline basis, the registry."""

from __future__ import annotations

import pytest
import torch

from training.digits.models import (
    DEFAULT_GRID,
    MODELS,
    BSplineKANLayer,
    DigitClassifier,
    DigitModelConfig,
    FourierKANLayer,
    WithProbabilities,
    bspline_basis,
    count_parameters,
    uniform_knots,
)
from training.errors import UsageError


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("hidden", [[16], [12, 8]])
def test_each_model_maps_images_to_ten_logits_and_every_parameter_gets_a_gradient(name, hidden):
    torch.manual_seed(0)
    net = DigitClassifier(DigitModelConfig(model=name, hidden=hidden))
    images = torch.rand(5, 1, 28, 28)
    logits = net(images)
    assert logits.shape == (5, 10) and torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits, torch.arange(5)).backward()
    for pname, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"{name}: no gradient reaches {pname}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_with_probabilities_returns_logits_and_their_softmax(name):
    net = WithProbabilities(DigitClassifier(DigitModelConfig(model=name, hidden=[8]))).eval()
    logits, probs = net(torch.rand(3, 1, 28, 28))
    assert torch.allclose(probs.sum(1), torch.ones(3), atol=1e-6)
    assert torch.equal(logits.argmax(1), probs.argmax(1))


def test_classifier_normalises_inputs_to_minus_one_one_inside_the_model():
    seen = {}
    net = DigitClassifier(DigitModelConfig(model="mlp", hidden=[4]))
    net.body[0].register_forward_hook(lambda m, inp, out: seen.update(x=inp[0]))
    net(torch.cat([torch.zeros(1, 1, 28, 28), torch.ones(1, 1, 28, 28)]))
    assert torch.equal(seen["x"][0], -torch.ones(784)) and torch.equal(seen["x"][1], torch.ones(784))


@pytest.mark.parametrize("grid_size", [1, 3, 5, 8])
def test_cubic_bspline_basis_is_a_partition_of_unity_inside_the_grid(grid_size):
    knots = uniform_knots(grid_size)
    x = torch.linspace(-1, 1, 1001)[:, None]
    basis = bspline_basis(x, knots)
    assert basis.shape == (1001, 1, grid_size + 3)
    assert (basis >= 0).all()
    assert torch.allclose(basis.sum(-1), torch.ones(1001, 1), atol=1e-5)


def test_cubic_bspline_has_its_textbook_values_at_the_knots():
    # A uniform cubic B-spline is 1/6, 2/3, 1/6 at its three inner knots.
    knots = uniform_knots(4)  # spacing 0.5, knots −2.5 … 2.5
    basis = bspline_basis(torch.tensor([[0.0]]), knots)[0, 0]
    assert torch.allclose(basis[basis > 1e-7], torch.tensor([1 / 6, 2 / 3, 1 / 6]), atol=1e-6)


def test_bspline_basis_vanishes_outside_the_extended_grid():
    basis = bspline_basis(torch.tensor([[-5.0], [5.0]]), uniform_knots(5))
    assert torch.equal(basis, torch.zeros_like(basis))


def test_bspline_kan_layer_adds_a_silu_branch_to_the_spline_branch():
    layer = BSplineKANLayer(3, 2, grid_size=5)
    x = torch.rand(4, 3) * 2 - 1
    with torch.no_grad():
        layer.spline_weight.zero_()
        expect = torch.nn.functional.silu(x) @ layer.base_weight.t()
    assert torch.allclose(layer(x), expect, atol=1e-6)


def test_fourier_kan_layer_computes_its_cosine_sine_series():
    layer = FourierKANLayer(2, 1, grid_size=3)
    with torch.no_grad():
        layer.coeffs.zero_()
        layer.coeffs[0, 0, 0, 1] = 2.0  # 2·cos(2·x0)
        layer.coeffs[1, 0, 1, 2] = -1.0  # −sin(3·x1)
        layer.bias.fill_(0.5)
    x = torch.tensor([[0.3, -0.7]])
    assert torch.allclose(layer(x), 2 * torch.cos(2 * x[:, :1]) - torch.sin(3 * x[:, 1:]) + 0.5, atol=1e-6)


def test_parameter_counts_follow_the_layer_formulas():
    h = 16
    counts = {name: count_parameters(DigitClassifier(DigitModelConfig(model=name, hidden=[h]))) for name in MODELS}
    assert counts["mlp"] == 784 * h + h + h * 10 + 10
    g = DEFAULT_GRID["sinekan"]
    assert counts["sinekan"] == (784 * h * g + g + h) + (h * 10 * g + g + 10)
    g = DEFAULT_GRID["fourier-kan"]
    assert counts["fourier-kan"] == (2 * 784 * h * g + h) + (2 * h * 10 * g + 10)
    g = DEFAULT_GRID["bspline-kan"]
    assert counts["bspline-kan"] == 784 * h * (g + 3 + 2) + h * 10 * (g + 3 + 2)


def test_unknown_model_name_lists_the_valid_ones():
    with pytest.raises(
        UsageError, match="unknown model 'resnet'; valid: bspline-kan, conv-sinekan, fourier-kan, mlp, sinekan"
    ):
        DigitModelConfig(model="resnet")


def test_grid_zero_means_the_model_default():
    assert DigitModelConfig(model="bspline-kan").grid_size == 5
    assert DigitModelConfig(model="sinekan").grid_size == 8
    assert DigitModelConfig(model="fourier-kan", grid_size=3).grid_size == 3


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_exported_graph_takes_any_batch_size(name):
    """The graph is traced at batch 2; onnxruntime must run it at 1 and 7 (a batch fixed in the trace fails)."""
    from training.digits.export import export_digits
    from training.export import ort_session

    graph, onnx_bytes = export_digits(DigitClassifier(DigitModelConfig(model=name, hidden=[8])).eval())
    sess = ort_session(onnx_bytes)
    for n in (1, 7):
        x = torch.rand(n, 1, 28, 28)
        logits, probs = sess.run(["logits", "probabilities"], {"images": x.numpy()})
        with torch.no_grad():
            assert probs.shape == (n, 10) and torch.allclose(torch.from_numpy(logits), graph(x)[0], atol=1e-4)
