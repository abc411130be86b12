"""Rate–distortion fine-tuning of grid tables (training/encodings/grid_rd.py) on a real fit of a small photo: the
tables end on lattices the file stores as 8-bit codes (the context code), the exported graph renders what the model
does, a larger λ makes a smaller file at a lower PSNR, and bad options are one line, exit 2, nothing written."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from commandline import OneLineParser
from fitstore import PRESETS
from modelrepo import ctxcode
from training.cli_image import add_image_options, fit_config
from training.encodings.grid_quant import exact_8bit, lattice_8bit
from training.encodings.grid_rd import write_lattice
from training.export import ort_session
from training.fit_image import evaluate, finish, image_file, train
from training.image_models import ImageINR
from training.images import load_image, pixel_centres

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fitted():
    """(config, image, trained weights) of the grid preset with the context code on a 128-pixel photo, a few steps."""
    p = OneLineParser(prog="test")
    add_image_options(p)
    argv = ["--image", "chelsea", "--size", "128", "--steps", "30", "--protocol", "full", "--no-progress"]
    cfg = fit_config(p.parse_args(argv + PRESETS["grid"]["argv"]))  # rice: the trained tables are context-coded anyway
    img, _ = load_image(cfg.image, cfg.size, cfg.crop, cfg.max_pixels)
    model, _ = train(cfg, img)
    return cfg, img, {k: v.clone() for k, v in model.state_dict().items()}


def rd(fitted, lam: float) -> tuple[ImageINR, dict, bytes, float]:
    cfg, img, state = fitted
    enc = dataclasses.replace(cfg.model.encoding, rd_lambda=lam, rd_steps=40)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoding=enc))
    model = ImageINR(cfg.model)
    model.load_state_dict(state)
    history: dict = {}
    model = finish(model.eval(), cfg, img, history)
    data, storage = image_file(model, cfg, [img.shape[1], img.shape[0]])
    assert storage["tables"]["u8_tables"] == len(model.encoding.tables)  # every level stored as 8-bit codes
    assert ctxcode.DOMAIN.encode() in data  # by the context code, whose rate it was trained for
    return model, history["rd"], data, evaluate(model, img, cfg.protocol)[0]["full_psnr"]


@pytest.fixture(scope="module")
def low_and_high(fitted):
    return rd(fitted, 1e-4), rd(fitted, 3e-3)


def test_the_tables_end_on_lattices_stored_as_codes_and_the_graph_renders_the_model(fitted, low_and_high):
    (model, report, data, psnr), _ = low_and_high
    assert report["lambda"] == 1e-4 and report["steps"] == 40 and psnr > 25
    for t in model.encoding.tables:
        q, scale, low = exact_8bit(t.detach())
        assert np.array_equal(
            torch.from_numpy(q.astype(np.float32)) * torch.from_numpy(scale) + torch.from_numpy(low), t.detach()
        )
    _, img, _ = fitted
    h, w, _ = img.shape
    sess = ort_session(data)
    coords = pixel_centres(h, w).reshape(-1, 2)
    got = sess.run(None, {sess.get_inputs()[0].name: coords})[0]
    with torch.no_grad():
        want = model(torch.from_numpy(coords)).numpy()
    assert np.abs(got - want).max() < 2e-3


def test_a_larger_lambda_is_a_smaller_file_at_a_lower_psnr(low_and_high):
    (_, low_report, low_data, low_psnr), (_, high_report, high_data, high_psnr) = low_and_high
    low_tables, high_tables = table_bytes(low_and_high[0][0]), table_bytes(low_and_high[1][0])
    assert high_tables < 0.8 * low_tables, (
        high_tables,
        low_tables,
    )  # the graph's own bytes are most of so small a file
    assert len(high_data) < len(low_data)
    assert high_psnr < low_psnr
    assert high_report["estimated_bits_per_pixel"] < low_report["estimated_bits_per_pixel"]


def table_bytes(model) -> int:
    return sum(ctxcode.size(exact_8bit(t.detach())[0]) for t in model.encoding.tables)


def test_a_lattice_is_found_again_per_channel_wide_narrow_and_constant():
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(1, 3, 20, 30, generator=g) * torch.tensor([2.0, 300.0, 0.0]).view(1, 3, 1, 1)
    table = torch.empty_like(latent)
    step = torch.tensor([0.013, 0.002, 0.5]).view(1, 3, 1, 1)
    centre = torch.tensor([-1.7, 0.2, 3.0]).view(1, 3, 1, 1)
    report = write_lattice(table, latent, step, centre)
    assert report["widened"] == 1 and max(report["steps"]) <= 255  # the wide channel on a coarser lattice
    q, scale, low = lattice_8bit(table)
    assert torch.equal(torch.from_numpy(q.astype(np.float32)) * torch.from_numpy(scale) + torch.from_numpy(low), table)
    assert float((table - (latent.round() * step + centre)).abs().max()) <= float(step.max()) * 2  # the rounding asked
    assert lattice_8bit(torch.randn(1, 1, 8, 8, generator=g)) is None  # arbitrary floats are no lattice


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "training", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--grid-rd-lambda", "-1"], "--grid-rd-lambda must be in 1e-07..1 (or 0: off), got -1"),
        (["--grid-rd-lambda", "nan"], "--grid-rd-lambda must be in"),
        (["--grid-rd-lambda", "1e-3", "--grid-rd-steps", "0"], "--grid-rd-steps must be in 1..100000"),
        (["--grid-rd-lambda", "1e-3", "--target-psnr", "38"], "--grid-rd-lambda sets the quality itself"),
        (["--grid-rd-lambda", "1e-3", "--grid-table-bits", "16"], "--grid-rd-lambda needs --grid-table-bits 8"),
    ],
)
def test_bad_options_are_one_line_exit_2_and_write_nothing(tmp_path, extra, message):
    out = tmp_path / "m"
    argv = ["fit-image", "--image", "chelsea", "--size", "32", "--steps", "2", "--no-progress", "--out", str(out)]
    preset = list(PRESETS["grid"]["argv"])
    if "--grid-table-bits" in extra:  # the preset's own 8 replaced
        i = preset.index("--grid-table-bits")
        del preset[i : i + 2]
    r = run_cli(*argv, *preset, *extra)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr
    assert not out.exists()
