"""`python -m training fit-digits / compare-digits`: the happy path and bad input (one line, exit 2,
nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from training.cli import main
from training.digits.idx import SPLITS, encode_idx, write_idx

ROOT = Path(__file__).resolve().parents[3]


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    return rc, capsys.readouterr().err


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]


def fit_args(data_dir, out, *extra) -> list[str]:
    return [
        "fit-digits",
        "--data-dir",
        str(data_dir),
        "--hidden",
        "8",
        "--epochs",
        "1",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


def test_fit_digits_cli_writes_a_model_that_onnxruntime_runs(glyph_dir, tmp_path):
    out = tmp_path / "models" / "glyphs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-digits",
            "--data-dir",
            str(glyph_dir),
            "--model",
            "sinekan",
            "--hidden",
            "16",
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout.split(" -> ")[0])
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert printed["test_accuracy"] == meta["metrics"]["test_accuracy"]
    assert meta["command"].startswith("python -m training fit-digits")
    assert meta["export"]["parity"]["max_abs_diff_probabilities"] <= 1e-5
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    probs = sess.run(["probabilities"], {"images": np.zeros((3, 1, 28, 28), np.float32)})[0]
    assert probs.shape == (3, 10)


def test_missing_data_dir_names_the_files_it_expected(tmp_path, capsys):
    rc, err = run_cli(fit_args(tmp_path / "absent", tmp_path / "m"), capsys)
    assert_one_line_error(rc, err, "does not exist", "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    assert not (tmp_path / "m").exists()


def test_truncated_idx_file_is_one_line_error(make_data_dir, tmp_path, capsys):
    d = make_data_dir()
    f = d / SPLITS["train"][0]
    f.write_bytes(f.read_bytes()[:5000])
    rc, err = run_cli(fit_args(d, tmp_path / "m"), capsys)
    assert_one_line_error(rc, err, "truncated", SPLITS["train"][0])
    assert not (tmp_path / "m").exists()


def test_wrong_magic_idx_file_is_one_line_error(make_data_dir, tmp_path, capsys):
    d = make_data_dir(gz=True)
    write_idx(d / f"{SPLITS['test'][1]}.gz", np.zeros(3, np.uint8))
    (d / f"{SPLITS['test'][1]}.gz").write_bytes(b"PK\x03\x04" + encode_idx(np.zeros(200, np.uint8))[4:])
    rc, err = run_cli(fit_args(d, tmp_path / "m"), capsys)
    assert_one_line_error(rc, err, "not an IDX file")
    assert not (tmp_path / "m").exists()


def test_mismatched_image_and_label_counts_are_one_line_error(make_data_dir, glyphs, tmp_path, capsys):
    d = make_data_dir()
    write_idx(d / SPLITS["train"][1], glyphs["train"][1][:100])
    rc, err = run_cli(fit_args(d, tmp_path / "m"), capsys)
    assert_one_line_error(rc, err, "600 images but", "100 labels")
    assert not (tmp_path / "m").exists()


def test_unknown_model_is_one_line_error_listing_valid_models(glyph_dir, tmp_path, capsys):
    rc, err = run_cli(fit_args(glyph_dir, tmp_path / "m", "--model", "transformer"), capsys)
    assert_one_line_error(
        rc, err, "unknown model 'transformer'", "bspline-kan, conv-sinekan, fourier-kan, mlp, sinekan"
    )
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--hidden", "0"], "positive integer"),
        (["--epochs", "-1"], "positive integer"),
        (["--lr", "nan"], "positive finite"),
        (["--dataset", "cifar"], "invalid choice"),
        (["--val-fraction", "0"], "--val-fraction"),
        (["--val-fraction", "1"], "--val-fraction"),
        (["--val-fraction", "1.5"], "--val-fraction"),
        (["--label-smoothing", "-0.1"], "--label-smoothing"),
        (["--schedule", "sometimes"], "unknown schedule 'sometimes'"),
        (["--ema", "2"], "--ema"),
        (["--distort-share", "0"], "--distort-share"),
        (["--distort-share", "1.5"], "--distort-share"),
        (["--elastic-alpha", "-3"], "--elastic-alpha"),
        (["--elastic-alpha", "nan"], "--elastic-alpha"),
        (["--elastic-sigma", "0"], "--elastic-sigma"),
        (["--elastic-sigma", "inf"], "--elastic-sigma"),
    ],
)
def test_bad_numbers_and_names_are_one_line_errors(glyph_dir, tmp_path, capsys, extra, needle):
    rc, err = run_cli(fit_args(glyph_dir, tmp_path / "m", *extra), capsys)
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "m").exists()


def test_compare_digits_rejects_an_unknown_model_before_training(glyph_dir, tmp_path, capsys):
    rc, err = run_cli(
        [
            "compare-digits",
            "--data-dir",
            str(glyph_dir),
            "--models",
            "mlp,kan2",
            "--table",
            str(tmp_path / "t.md"),
            "--plots",
            str(tmp_path / "p"),
        ],
        capsys,
    )
    assert_one_line_error(rc, err, "unknown model 'kan2'")
    assert list(tmp_path.iterdir()) == []


def test_compare_digits_writes_a_table_row_per_run_and_two_plots(glyph_dir, tmp_path, capsys):
    table, plots = tmp_path / "cmp.md", tmp_path / "img" / "digits-glyphs"
    rc = main(
        [
            "compare-digits",
            "--data-dir",
            str(glyph_dir),
            "--hidden",
            "8",
            "--depths",
            "1",
            "--epochs",
            "1",
            "--train-limit",
            "200",
            "--timing-seconds",
            "0.01",
            "--no-progress",
            "--table",
            str(table),
            "--plots",
            str(plots),
        ]
    )
    assert rc == 0
    text = table.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == 4
    assert {r.split("|")[1].strip() for r in rows} == {"sinekan", "mlp", "bspline-kan", "fourier-kan"}
    assert "200 training images" in text and "1 epochs" in text
    for what in ("accuracy", "speed"):
        png = plots.with_name(f"digits-glyphs-{what}.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoints_of_two_seeds_export_as_one_graph_that_onnxruntime_runs(glyph_dir, tmp_path, capsys):
    for seed in (0, 1):
        rc, err = run_cli(
            [
                "fit-digits",
                "--data-dir",
                str(glyph_dir),
                "--hidden",
                "8",
                "--epochs",
                "1",
                "--no-progress",
                "--seed",
                str(seed),
                "--checkpoint",
                str(tmp_path / f"s{seed}.pt"),
            ],
            capsys,
        )
        assert rc == 0, err
    out = tmp_path / "ens"
    rc, err = run_cli(
        [
            "export-digits",
            "--data-dir",
            str(glyph_dir),
            "--checkpoint",
            str(tmp_path / "s0.pt"),
            str(tmp_path / "s1.pt"),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0, err
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["architecture"]["ensemble"] == 2 and [m["seed"] for m in meta["metrics"]["members"]] == [0, 1]
    assert meta["export"]["parity"]["argmax_mismatches"] == 0
    assert str(tmp_path) not in json.dumps(meta) and str(glyph_dir) not in json.dumps(meta)  # no absolute paths
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.run(["probabilities"], {"images": np.zeros((2, 1, 28, 28), np.float32)})[0].shape == (2, 10)


def test_export_digits_refuses_a_file_that_is_not_a_checkpoint(glyph_dir, tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    rc, err = run_cli(
        ["export-digits", "--data-dir", str(glyph_dir), "--checkpoint", str(bad), "--out", str(tmp_path / "m")], capsys
    )
    assert_one_line_error(rc, err, "cannot read digit checkpoint")
    assert not (tmp_path / "m").exists()


@pytest.fixture(scope="module")
def checkpoints(glyph_dir, tmp_path_factory):
    """{'held': a held-out fit, 'refit': the same recipe refit on the slice too, 'other': another width}."""
    d = tmp_path_factory.mktemp("ckpt")
    base = ["fit-digits", "--data-dir", str(glyph_dir), "--epochs", "1", "--no-progress"]
    for name, extra in (
        ("held", ["--hidden", "16"]),
        ("refit", ["--hidden", "16", "--refit", "--seed", "1"]),
        ("other", ["--hidden", "8"]),
    ):
        assert main([*base, *extra, "--checkpoint", str(d / f"{name}.pt")]) == 0
    return {name: d / f"{name}.pt" for name in ("held", "refit", "other")}


def export(glyph_dir, out, capsys, *extra) -> tuple[int, str]:
    return run_cli(["export-digits", "--data-dir", str(glyph_dir), "--out", str(out), *extra], capsys)


def test_fp16_weights_export_halves_the_file_and_onnxruntime_matches_the_rounded_model(
    glyph_dir, checkpoints, tmp_path, capsys
):
    ckpt = checkpoints["held"]
    sizes, metas = {}, {}
    for name, extra in (("fp32", []), ("fp16", ["--fp16-weights"])):
        rc, err = export(glyph_dir, tmp_path / name, capsys, "--checkpoint", str(ckpt), *extra)
        assert rc == 0, err
        sizes[name] = (tmp_path / name / "1" / "model.onnx").stat().st_size
        metas[name] = json.loads((tmp_path / name / "1" / "metadata.json").read_text())
    assert sizes["fp16"] < 0.6 * sizes["fp32"], sizes
    assert metas["fp32"]["export"]["weights"] == "float32"
    assert (
        metas["fp16"]["export"]["weights"].startswith("float16") and metas["fp16"]["export"]["fp16_initializers"] >= 1
    )
    assert metas["fp16"]["export"]["parity"]["argmax_mismatches"] == 0
    import onnx
    import onnxruntime as ort
    import torch

    from training.digits.checkpoints import load_checkpoint
    from training.fp16 import round_weights_fp16

    path = tmp_path / "fp16" / "1" / "model.onnx"
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in onnx.load(str(path)).graph.initializer)
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["logits"], {"images": x})[0]
    model = round_weights_fp16(load_checkpoint(ckpt)[0])
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 1e-5


def test_refit_trains_on_the_slice_too_and_exports_with_the_held_out_models_validation_score(
    glyph_dir, checkpoints, tmp_path, capsys
):
    import torch

    held = torch.load(checkpoints["held"], weights_only=True)["info"]["validation"]
    refit = torch.load(checkpoints["refit"], weights_only=True)["info"]["validation"]
    assert held["train_size"] == 540 and refit["train_size"] == 600 and refit["refit"] is True
    assert refit["indices_sha256"] == held["indices_sha256"]
    rc, err = export(
        glyph_dir,
        tmp_path / "m",
        capsys,
        "--checkpoint",
        str(checkpoints["refit"]),
        "--chosen-with",
        str(checkpoints["held"]),
    )
    assert rc == 0, err
    meta = json.loads((tmp_path / "m" / "1" / "metadata.json").read_text())
    assert meta["metrics"]["val_accuracy"] == held["accuracy"]
    assert meta["metrics"]["chosen_with"][0]["val_accuracy"] == held["accuracy"]
    assert meta["metrics"]["members"][0]["val_accuracy"] is None and meta["training"]["validation"]["refit"]
    assert meta["training"]["validation"]["accuracy"] == held["accuracy"]
    assert "refit on all 600 training digits" in meta["selection"]


@pytest.mark.parametrize(
    "ckpt, chosen, needle",
    [
        ("refit", None, "give --chosen-with"),
        ("held", "held", "--chosen-with is for refit"),
        ("refit", "refit", "is a refit"),
        ("refit", "other", "another recipe"),
    ],
)
def test_refit_export_refuses_a_missing_or_wrong_held_out_model(
    glyph_dir, checkpoints, tmp_path, capsys, ckpt, chosen, needle
):
    extra = ["--chosen-with", str(checkpoints[chosen])] if chosen else []
    rc, err = export(glyph_dir, tmp_path / "m", capsys, "--checkpoint", str(checkpoints[ckpt]), *extra)
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "m").exists()
