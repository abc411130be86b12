"""Training on the rendered-glyph fixture, evaluation, export parity, the model directory."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from training.digits.export import check_digits_parity, export_digits, fit_digits
from training.digits.fit import (
    FitConfig,
    checkpoint,
    confusion_matrix,
    evaluate,
    random_affine,
    rebuild,
    to_tensor,
    train,
)
from training.digits.idx import load_dataset
from training.digits.models import DigitModelConfig
from training.export import ExportParityError, ort_session


def small_config(model: str = "sinekan", **kw) -> FitConfig:
    base = dict(
        epochs=6, batch_size=32, lr=1e-3, progress=False, device="cpu", model=DigitModelConfig(model=model, hidden=[32])
    )
    return FitConfig(**{**base, **kw})


@pytest.fixture(scope="session")
def glyph_data(glyph_dir):
    return load_dataset(glyph_dir)


@pytest.fixture(scope="session")
def trained(glyph_data):
    model, info = train(small_config(), glyph_data)
    return model, info


def test_short_sinekan_training_on_glyphs_beats_chance_by_a_wide_margin(trained, glyph_data):
    model, info = trained
    acc = evaluate(model, glyph_data.test)["test_accuracy"]
    assert acc >= 0.6, f"test accuracy {acc} (chance is 0.1)"
    assert len(info["history"]) == 6 and "test_accuracy" not in info["history"][-1]
    assert info["history"][-1]["val_accuracy"] == info["validation"]["accuracy"] >= 0.5
    assert info["history"][-1]["train_loss"] < info["history"][0]["train_loss"]
    assert 0 < info["history"][-1]["val_loss"] < info["history"][0]["val_loss"]


@pytest.mark.parametrize("name", ["mlp", "bspline-kan", "fourier-kan"])
def test_each_baseline_learns_the_glyphs_too(name, glyph_data):
    model, _ = train(small_config(name), glyph_data)
    assert evaluate(model, glyph_data.test)["test_accuracy"] >= 0.4


def test_reported_accuracy_and_confusion_matrix_agree(trained, glyph_data):
    m = evaluate(trained[0], glyph_data.test)
    cm = np.asarray(m["confusion_matrix"])
    assert cm.shape == (10, 10) and cm.sum() == len(glyph_data.test.labels)
    assert np.trace(cm) / cm.sum() == pytest.approx(m["test_accuracy"], abs=1e-5)
    assert cm.sum(1).tolist() == np.bincount(glyph_data.test.labels, minlength=10).tolist()


def test_confusion_matrix_rows_are_true_classes():
    cm = confusion_matrix(np.array([0, 0, 1]), np.array([0, 2, 1]), n=3)
    assert cm.tolist() == [[1, 0, 1], [0, 1, 0], [0, 0, 0]]


def test_training_is_reproducible_for_a_seed(glyph_data):
    a, _ = train(small_config("mlp", epochs=1), glyph_data)
    b, _ = train(small_config("mlp", epochs=1), glyph_data)
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), n


def test_random_affine_keeps_shape_range_and_moves_pixels():
    x = to_tensor(np.pad(np.full((1, 8, 8), 255, np.uint8), ((0, 0), (10, 10), (10, 10))))
    y = random_affine(x.repeat(4, 1, 1, 1), torch.Generator().manual_seed(0), p=1.0)
    assert y.shape == (4, 1, 28, 28) and y.min() >= 0 and y.max() <= 1
    assert all(not torch.allclose(yi, x[0]) for yi in y)
    assert y.sum((1, 2, 3)).sub(x.sum()).abs().max() < 0.3 * x.sum()  # small transforms keep the ink


def test_random_affine_leaves_the_unpicked_share_of_images_untouched():
    x = torch.rand(400, 1, 28, 28)
    assert torch.equal(random_affine(x, torch.Generator().manual_seed(0), p=0.0), x)
    same = (random_affine(x, torch.Generator().manual_seed(0), p=0.5) == x).all(3).all(2).all(1)
    assert 0.35 < same.float().mean() < 0.65


def test_checkpoint_rebuilds_the_same_function(trained):
    model, _ = trained
    x = torch.rand(4, 1, 28, 28)
    again = rebuild(checkpoint(model, small_config()))
    assert torch.equal(again(x), model(x))


def test_export_matches_torch_on_the_test_split(trained, glyph_data):
    graph, onnx_bytes = export_digits(trained[0])
    images = to_tensor(glyph_data.test.images).numpy()
    report = check_digits_parity(graph, onnx_bytes, images)
    assert report["argmax_mismatches"] == 0 and report["max_abs_diff_probabilities"] <= 1e-5
    sess = ort_session(onnx_bytes)
    assert [i.name for i in sess.get_inputs()] == ["images"]
    assert [o.name for o in sess.get_outputs()] == ["logits", "probabilities"]
    logits, probs = sess.run(None, {"images": images[:1]})
    assert logits.shape == (1, 10) and np.isclose(probs.sum(), 1, atol=1e-6)


def test_parity_check_rejects_an_onnx_graph_of_another_model(trained, glyph_data):
    other, _ = train(small_config("mlp", epochs=1), glyph_data)
    _, wrong_bytes = export_digits(other)
    graph, _ = export_digits(trained[0])
    with pytest.raises(ExportParityError):
        check_digits_parity(graph, wrong_bytes, to_tensor(glyph_data.test.images).numpy())


def test_fit_digits_writes_a_complete_model_directory(glyph_data, tmp_path):
    out = tmp_path / "glyph-digits"
    cfg = small_config("mlp", epochs=2)
    meta = fit_digits(cfg, glyph_data, out)
    assert sorted(p.name for p in out.iterdir()) == ["1", "config.pbtxt", "metadata.json"]
    on_disk = json.loads((out / "1" / "metadata.json").read_text())
    assert {**on_disk, "name": "glyph-digits", "task": "digits"} == meta
    assert json.loads((out / "metadata.json").read_text())["task"] == "digits"
    assert meta["task"] == "digits" and meta["dataset"]["train_size"] == 600
    assert meta["architecture"]["model"] == "mlp" and meta["architecture"]["hidden"] == [32]
    assert meta["architecture"]["parameters"] == 784 * 32 + 32 + 32 * 10 + 10
    assert set(meta["metrics"]) >= {"test_accuracy", "confusion_matrix"}
    assert meta["training"]["epochs"] == 2 and meta["training"]["lr_decay_per_epoch"] == 0.9
    val = meta["training"]["validation"]
    assert val["fraction"] == 0.1 and val["stratified"] and val["size"] == 60 and val["train_size"] == 540
    assert val["per_class"] == [6] * 10 and meta["metrics"]["val_accuracy"] == val["accuracy"]
    assert "validation" in meta["selection"]
    pbtxt = (out / "config.pbtxt").read_text()
    assert "max_batch_size: 256" in pbtxt and "dims: 1\n  dims: 28\n  dims: 28\n" in pbtxt and "dims: 10\n" in pbtxt
    assert "dynamic_batching" in pbtxt
    sess = ort_session((out / "1" / "model.onnx").read_bytes())
    images = to_tensor(glyph_data.test.images).numpy()
    pred = np.concatenate(
        [sess.run(["probabilities"], {"images": images[i : i + 256]})[0] for i in range(0, len(images), 256)]
    ).argmax(1)
    assert float((pred == glyph_data.test.labels).mean()) == pytest.approx(meta["metrics"]["test_accuracy"], abs=1e-5)


def test_validation_slice_is_stratified_seeded_and_disjoint(glyph_data):
    from training.digits.validation import stratified_split

    train_a, val_a, info = stratified_split(glyph_data.train, 0.2, seed=3)
    _, val_b, _ = stratified_split(glyph_data.train, 0.2, seed=3)
    _, val_c, _ = stratified_split(glyph_data.train, 0.2, seed=4)
    assert np.bincount(val_a.labels).tolist() == [12] * 10 and len(train_a.labels) == 480
    assert np.array_equal(val_a.images, val_b.images) and not np.array_equal(val_a.images, val_c.images)
    rows = {im.tobytes() for im in train_a.images}
    assert not any(im.tobytes() in rows for im in val_a.images)
    assert info["size"] == 120 and info["train_size"] == 480


@pytest.mark.parametrize(
    "options",
    [
        dict(elastic=True),
        dict(augment=True, elastic=True, label_smoothing=0.1),
        dict(ema=0.9, schedule="cosine"),
        dict(schedule="onecycle"),
        dict(elastic=True, distort_share=1.0, elastic_alpha=8.0, elastic_sigma=3.0),
    ],
)
def test_each_recipe_option_trains_a_model_that_learns(glyph_data, options):
    model, info = train(small_config(epochs=4, **options), glyph_data)
    assert info["history"][-1]["val_accuracy"] >= 0.3, (options, info["history"])


def test_elastic_distortion_moves_ink_smoothly_and_keeps_the_untouched_share():
    from training.digits.augment import distort, elastic_field

    field = elastic_field(2, 28, torch.Generator().manual_seed(0), "cpu")
    px = field * 14  # normalised → pixels
    assert field.shape == (2, 28, 28, 2) and 0.3 < px.abs().mean() < 4
    assert (px[:, 1:] - px[:, :-1]).abs().mean() < 0.3 * px.abs().mean()  # smooth: neighbours move alike
    x = to_tensor(np.pad(np.full((4, 8, 8), 255, np.uint8), ((0, 0), (10, 10), (10, 10))))
    y = distort(x, torch.Generator().manual_seed(0), affine=False, elastic=True, p=1.0)
    assert y.shape == x.shape and y.min() >= 0 and y.max() <= 1 and not torch.equal(y, x)
    assert torch.equal(distort(x, torch.Generator().manual_seed(0), affine=True, elastic=True, p=0.0), x)


def test_elastic_alpha_scales_the_field_and_sigma_smooths_it():
    from training.digits.augment import elastic_field

    def field(alpha, sigma):
        return elastic_field(2, 28, torch.Generator().manual_seed(0), "cpu", alpha, sigma)

    assert torch.allclose(field(17.0, 4.0) * 2, field(34.0, 4.0), atol=1e-6)

    def roughness(f):  # neighbour differences relative to the size of the field
        return float((f[:, 1:] - f[:, :-1]).abs().mean() / f.abs().mean())

    assert roughness(field(34.0, 6.0)) < roughness(field(34.0, 2.0))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(val_fraction=0.0), "--val-fraction"),
        (dict(val_fraction=1.0), "--val-fraction"),
        (dict(label_smoothing=-0.1), "--label-smoothing"),
        (dict(schedule="step"), "unknown schedule"),
        (dict(ema=1.0), "--ema"),
        (dict(distort_share=0.0), "--distort-share"),
        (dict(elastic_alpha=0.0), "--elastic-alpha"),
        (dict(elastic_sigma=float("nan")), "--elastic-sigma"),
    ],
)
def test_nonsense_recipe_options_are_refused(options, message):
    from training.errors import UsageError

    with pytest.raises(UsageError, match=message):
        small_config(**options).validate()
