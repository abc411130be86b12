"""Short real fits, export parity, the model directory, and CLI bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from training.encodings import EncodingConfig
from training.export import ExportParityError, check_parity, export_onnx
from training.fit_image import FitConfig, evaluate, train
from training.image_models import ImageINR, ImageModelConfig, fold_batchnorm
from training.images import load_image, pixel_centres
from training.metrics import psnr
from training.repository import sha256_bytes

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--size", "32", "--width", "64", "--depth", "3", "--features", "64", "--no-progress"]


def run_cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "training", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("repo") / "astro"
    r = run_cli(
        "fit-image",
        "--image",
        "astronaut",
        "--encoding",
        "gaussian",
        "--scale",
        "6",
        "--steps",
        "150",
        *SMALL,
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    return out


def fit(encoding: str, steps: int = 150) -> dict:
    img, _ = load_image("astronaut", 32)
    cfg = FitConfig(
        image="astronaut",
        size=32,
        steps=steps,
        progress=False,
        device="cpu",
        model=ImageModelConfig(width=64, depth=3, encoding=EncodingConfig(name=encoding, scale=6, features=64)),
    )
    model, _ = train(cfg, img)
    return evaluate(model, img, "paper")[0]


def test_fourier_features_fit_far_above_the_no_encoding_baseline():
    with_features, without = fit("gaussian"), fit("none")
    assert with_features["train_psnr"] > without["train_psnr"] + 8, (with_features, without)
    assert with_features["train_psnr"] > 25


def test_export_writes_the_triton_layout_with_metadata(exported):
    files = {p.relative_to(exported).as_posix() for p in exported.rglob("*")}
    assert {"1/model.onnx", "1/metadata.json", "config.pbtxt", "metadata.json", "1/preview.png"} <= files
    assert json.loads((exported / "metadata.json").read_text())["task"] == "image"
    meta = json.loads((exported / "1" / "metadata.json").read_text())
    assert meta["onnx_sha256"] == sha256_bytes((exported / "1" / "model.onnx").read_bytes())
    assert meta["architecture"]["encoding"]["name"] == "gaussian"
    assert meta["source"]["image"] == "astronaut" and meta["source"]["size"] == [32, 32]
    assert {"train_psnr", "test_psnr", "ssim"} <= set(meta["metrics"])
    assert meta["command"].startswith("python -m training fit-image")
    assert 'platform: "onnxruntime_onnx"' in (exported / "config.pbtxt").read_text()
    assert not list(exported.parent.glob(".astro*")), "temporary directories were left behind"


def test_exported_model_gives_back_the_training_pixels(exported):
    sess = ort.InferenceSession(str(exported / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["coords"]
    assert [o.name for o in sess.get_outputs()] == ["rgb"]
    img, _ = load_image("astronaut", 32)
    coords = pixel_centres(32, 32)
    rgb = sess.run(["rgb"], {"coords": coords.reshape(-1, 2)})[0].reshape(32, 32, 3)
    meta = json.loads((exported / "1" / "metadata.json").read_text())
    assert psnr(rgb[::2, ::2], img[::2, ::2]) == pytest.approx(meta["metrics"]["train_psnr"], abs=0.01)
    assert meta["metrics"]["train_psnr"] > 25


@pytest.mark.parametrize(
    "model, extra",
    [
        ("mlp", {}),
        ("mlp-bn", {}),
        ("sinekan", {}),
        ("sinekan", dict(first_grid=32, first_freq=16.0, sinekan_init="paper", encoding=EncodingConfig(name="none"))),
        (
            "sinekan",
            dict(first_grid=8, first_freq=1.0, hidden_freq=2.0, encoding=EncodingConfig(name="projection", features=8)),
        ),
    ],
)
def test_every_network_exports_with_onnx_equal_to_torch(model, extra):
    torch.manual_seed(0)
    net = ImageINR(
        ImageModelConfig(
            **{
                "model": model,
                "width": 16,
                "depth": 3,
                "grid_size": 4,
                "encoding": EncodingConfig(name="gaussian", features=8),
                **extra,
            }
        )
    )
    if model == "mlp-bn":  # give BatchNorm non-trivial statistics, then freeze them
        net.train()
        for _ in range(5):
            net(torch.rand(64, 2))
        net.eval()
        probe = torch.rand(300, 2)
        expected = net(probe)
        fold_batchnorm(net)
        torch.testing.assert_close(net(probe), expected, atol=1e-5, rtol=1e-5)
    onnx_bytes = export_onnx(net, torch.rand(4, 2), "coords", ["rgb"])
    report = check_parity(net, onnx_bytes, np.random.rand(1000, 2).astype(np.float32), "coords", ["rgb"])
    assert report["rgb"] <= 1e-5


def test_parity_check_refuses_a_model_that_differs_from_torch():
    net = ImageINR(ImageModelConfig(width=8, depth=2, encoding=EncodingConfig(name="none")))
    onnx_bytes = export_onnx(net, torch.rand(4, 2), "coords", ["rgb"])
    with torch.no_grad():
        net.body[0].bias.add_(1.0)  # torch no longer matches the exported graph
    with pytest.raises(ExportParityError, match="differs from torch"):
        check_parity(net, onnx_bytes, np.random.rand(50, 2).astype(np.float32), "coords", ["rgb"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--image", "mona-lisa"], "unknown image 'mona-lisa'"),
        (["--encoding", "fourier"], "invalid choice: 'fourier'"),
        (["--model", "transformer"], "invalid choice: 'transformer'"),
        (["--size", "0"], "--size"),
        (["--size", "abc"], "--size"),
        (["--steps", "-5"], "--steps"),
        (["--scale", "nan"], "--scale"),
        (["--scale", "-1"], "--scale"),
        (["--lr", "inf"], "--lr"),
        (["--model", "sinekan", "--first-grid", "0"], "--first-grid"),
        (["--model", "sinekan", "--first-freq", "-2"], "--first-freq"),
        (["--model", "sinekan", "--hidden-freq", "0"], "--hidden-freq"),
        (["--model", "sinekan", "--hidden-freq", "inf"], "--hidden-freq"),
        (["--model", "sinekan", "--sinekan-init", "xavier"], "invalid choice: 'xavier'"),
        (["--target-bytes", "0"], "--target-bytes"),
        (["--target-bytes", "2MB"], "--target-bytes"),
        (["--target-bytes", "100"], "--target-bytes must be 1024 …"),
        (["--target-psnr", "nan"], "--target-psnr"),
        (["--target-psnr", "-3"], "--target-psnr"),
        (["--target-psnr", "150"], "--target-psnr must be a number of dB in (0, 100]"),
        (["--target-bytes", "100000"], "the gaussian encoding takes no byte or PSNR target"),
        (["--target-bytes", "100000", "--target-psnr", "40"], "give one target, not both"),
        (["--encoding", "grid", "--target-psnr", "30"], "needs the grid's 8-bit tables and a native level"),
    ],
)
def test_bad_fit_image_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "m"
    r = (
        run_cli("fit-image", *args, "--steps", "1", *SMALL, "--out", str(out))
        if "--steps" not in args
        else run_cli("fit-image", *args, *SMALL, "--out", str(out))
    )
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_fit_image_writes_a_model_within_its_byte_target(tmp_path):
    """A real grid-preset fit through the CLI with --target-bytes: model.onnx at most that, the rate control's choice
    in metadata.json; the same fit aiming below its smallest file is one line, exit 2, after training, nothing
    written."""
    from fitstore import PRESETS

    base = ["fit-image", "--image", "chelsea", "--size", "192", "--steps", "30", "--protocol", "full"]
    base += ["--no-progress", *PRESETS["grid"]["argv"]]
    out = tmp_path / "m"
    r = run_cli(*base, "--target-bytes", "46000", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "1" / "metadata.json").read_text())
    rate = meta["training"]["native_refit"]["rate"]
    assert (out / "1" / "model.onnx").stat().st_size == rate["file_bytes"] <= rate["target_bytes"] == 46000
    assert rate["native_levels"] < 255 and meta["metrics"]["full_psnr"] > 25
    r = run_cli(*base, "--target-bytes", "20000", "--out", str(tmp_path / "n"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--target-bytes 20000: the smallest file this grid makes is" in r.stderr
    assert not (tmp_path / "n").exists()


def test_unreadable_image_file_is_refused(tmp_path):
    bad = tmp_path / "not-an-image.png"
    bad.write_bytes(b"this is text, not a PNG")
    r = run_cli("fit-image", "--image", str(bad), "--steps", "1", *SMALL, "--out", str(tmp_path / "m"))
    assert r.returncode == 2 and "cannot read image file" in r.stderr
    assert not (tmp_path / "m").exists()


def test_sweep_scale_writes_a_table_and_a_plot(tmp_path):
    out = tmp_path / "sweep"
    r = run_cli("sweep-scale", "--image", "camera", "--scales", "1,8", "--steps", "30", *SMALL, "--out", str(out))
    assert r.returncode == 0, r.stderr
    table = (tmp_path / "sweep.md").read_text()
    assert "| 1 |" in table and "| 8 |" in table
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_directory_is_readable_by_other_users(exported):
    # mkdtemp creates 0700 folders; a container's non-root user must still read the model.
    assert exported.stat().st_mode & 0o005 == 0o005


def fit_config_of(*argv):
    import argparse

    from training.cli_image import add_image_options, fit_config

    p = argparse.ArgumentParser()
    add_image_options(p)
    return fit_config(p.parse_args(list(argv)))


def parsed(*argv):
    return fit_config_of(*argv).model


def test_model_sinekan_alone_gives_the_benchmarked_variant_and_explicit_options_win():
    """`--model sinekan` with every other option left out is the best SineKAN of docs/benchmarks.md, fourier_table;
    an option given on the command line is kept, even when it equals fit-image's own default."""
    from training.image_models import MODEL_DEFAULTS

    m = parsed("--model", "sinekan")
    d = MODEL_DEFAULTS["sinekan"]
    assert (m.encoding.name, m.encoding.features, m.encoding.scale) == (d["encoding"], d["features"], d["scale"])
    assert (m.width, m.grid_size, m.first_grid, m.first_freq, m.hidden_freq) == (
        d["width"],
        d["grid"],
        d["first_grid"],
        d["first_freq"],
        d["hidden_freq"],
    )
    from training.cli_image import FIT_DEFAULTS

    assert (
        fit_config_of("--model", "sinekan").lr == d["lr"] and fit_config_of("--model", "mlp").lr == FIT_DEFAULTS["lr"]
    )
    assert fit_config_of("--model", "sinekan", "--lr", "5e-3").lr == 5e-3
    m = parsed(
        "--model",
        "sinekan",
        "--encoding",
        "gaussian",
        "--width",
        "256",
        "--grid",
        "8",
        "--scale",
        "10",
        "--first-freq",
        "0",
        "--hidden-freq",
        "1",
    )
    assert (m.encoding.name, m.width, m.grid_size, m.encoding.scale, m.first_freq, m.hidden_freq) == (
        "gaussian",
        256,
        8,
        10.0,
        0.0,
        1.0,
    )
    mlp = parsed("--model", "mlp")
    assert (mlp.encoding.name, mlp.width, mlp.encoding.features, mlp.encoding.scale) == ("gaussian", 256, 256, 10.0)


def test_hidden_freq_scales_the_later_grids_and_first_freq_0_is_the_papers():
    net = ImageINR(parsed("--model", "sinekan", "--first-freq", "0", "--hidden-freq", "2.5")).body
    assert torch.allclose(net[0].frequencies, torch.arange(1, net[0].grid_size + 1, dtype=torch.float32))
    g = net[1].grid_size
    assert torch.allclose(net[1].frequencies, 2.5 * torch.arange(1, g + 1, dtype=torch.float32) / (g + 1))


def test_fit_image_writes_the_same_version_as_an_export_given_the_whole_render(tmp_path):
    """fit_image drops the image and its render before the export (its peak: docs/benchmarks.md, "one-model rule"),
    passing the preview's pixels alone; a real grid-preset fit of a photo wider than the preview exported with the
    whole render, as before, writes the same model.onnx and preview.png, byte for byte, and the same parity."""
    from PIL import Image

    from fitstore import PRESETS
    from training.fit_image import PREVIEW_SIDE, export_image_model, finish, fit_image

    yy, xx = np.mgrid[0:24, 0 : PREVIEW_SIDE + 76]
    rgb = np.stack([xx / xx.max(), yy / yy.max(), 0.5 + 0.4 * np.sin(xx / 7.0) * np.cos(yy / 3.0)], -1)
    photo = tmp_path / "wide.png"
    Image.fromarray((rgb * 255 + 0.5).astype(np.uint8)).save(photo)
    argv = ["--image", str(photo), "--steps", "6", "--protocol", "full", *PRESETS["grid"]["argv"], "--no-progress"]
    cfg = fit_config_of(*argv)
    fit_image(cfg, tmp_path / "dropped")
    img, source = load_image(str(photo))
    model, history = train(cfg, img)
    model = finish(model, cfg, img, history)
    metrics, full = evaluate(model, img, cfg.protocol)
    export_image_model(model, cfg, tmp_path / "whole", source, metrics, history, full)
    for name in ("model.onnx", "preview.png"):
        assert (tmp_path / "dropped/1" / name).read_bytes() == (tmp_path / "whole/1" / name).read_bytes(), name
    meta = [json.loads((tmp_path / d / "1/metadata.json").read_text()) for d in ("dropped", "whole")]
    assert meta[0]["export"] == meta[1]["export"] and meta[0]["metrics"] == meta[1]["metrics"]
    with Image.open(tmp_path / "dropped/1/preview.png") as im:
        assert im.size[0] == PREVIEW_SIDE < img.shape[1]


def test_the_parity_check_without_the_arena_reports_what_the_arena_session_computes():
    """check_parity's session runs without onnxruntime's arena (a one-model fit's peak): the same outputs."""
    from training.export import ort_session

    torch.manual_seed(0)
    net = ImageINR(ImageModelConfig(depth=2, width=16, encoding=EncodingConfig(name="gaussian", features=8))).eval()
    onnx_bytes = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    probe = np.random.default_rng(0).random((512, 2), dtype=np.float32)
    report = check_parity(net, onnx_bytes, probe, "coords", ["rgb"])
    with torch.no_grad():
        ref = net(torch.from_numpy(probe)).numpy()
    got = ort_session(onnx_bytes, optimize=False, arena=True).run(["rgb"], {"coords": probe})[0]
    plain = ort_session(onnx_bytes, optimize=False, arena=False).run(["rgb"], {"coords": probe})[0]
    assert np.array_equal(got, plain) and report["rgb"] == float(np.max(np.abs(ref - plain)))
