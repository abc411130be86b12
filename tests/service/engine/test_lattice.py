"""Lattice renders of dense grid models (service/engine/lattice.py, service/render/lattice.py) equal the whole graph.

The models are built and exported by the training code with random tables (parity needs no fit), in every storage
the exporter writes: 8-bit tables with a native luma level (the grid preset), float16 tables, float32 tables. Each
is rendered on its lattice and through the whole graph point by point, at native scale (the native level a crop),
at coarser and finer scales, with odd viewports beyond the unit square, mirrored, supersampled and with a
transparent background; both agree within the export's parity gate. Rotated renders, hashed grids and Fourier models
keep the plain path, and a lattice that disagrees with its graph is refused at load.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from modelrepo import read_spec
from service.engine import lattice as lattice_module
from service.engine.lattice import PARITY, positions
from service.engine.lattice_graph import read_lattice
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.geometry.sampling import Background
from service.render.imaging import RenderSpec, new_image, plain_sampler, render_tile
from service.render.lattice import lattice_sampler
from service.render.tiling import tiles
from training.encodings import EncodingConfig
from training.encodings.grid_quant import round_tables_8bit
from training.fit_image import FitConfig, export_image_model
from training.fp16 import round_weights_fp16
from training.image_models import ImageINR, ImageModelConfig

ROOT = Path(__file__).resolve().parents[3]
W, H = 150, 100
STORAGE = {  # the fit options of each table storage
    "8-bit, native luma": ({"grid_table_bits": 8, "grid_finest_features": 1}, True),
    "float16": ({"grid_table_bits": 16}, True),
    "float32": ({"grid_table_bits": 16}, False),
}


def grid_folder(tmp_path, name: str, enc: dict, fp16: bool, depth: int = 2, width: int = 32):
    cfg = ImageModelConfig(
        depth=depth, width=width, encoding=EncodingConfig(**{"name": "grid", "image_size": [W, H], **enc})
    )
    torch.manual_seed(0)
    model = ImageINR(cfg).eval()
    with torch.no_grad():  # tables that differ from cell to cell, as a fit leaves them
        for t in model.encoding.tables:
            t.normal_(0, 0.5)
    if fp16:
        round_weights_fp16(model)
    if enc.get("grid_table_bits") == 8:
        round_tables_8bit(model)
    preview = np.zeros((4, 4, 3), np.float32)
    export_image_model(
        model, FitConfig(model=cfg, fp16_weights=fp16), tmp_path / name, {"size": [W, H]}, {}, {}, preview
    )
    runtime = runtime_for(tmp_path / name, read_spec(tmp_path / name), 1, RuntimeOptions())
    assert runtime.load(), runtime.error
    return runtime


def rgb(sample, spec: RenderSpec, tile_samples: int = 2048) -> np.ndarray:
    k = spec.supersample
    out = np.zeros((spec.height * k, spec.width * k, 3))
    for t in tiles(spec.height, spec.width, k, tile_samples):
        out[t.y0 * k : t.y1 * k, t.x0 * k : t.x1 * k] = sample(t).reshape((t.y1 - t.y0) * k, (t.x1 - t.x0) * k, 3)
    return out


VIEWS = {  # (width, height, matrix, viewport, supersample)
    "native scale, a crop": (64, 48, np.eye(3)[:2], (40 / W, 30 / H, 104 / W, 78 / H), 1),
    "the whole image": (W, H, np.eye(3)[:2], (0, 0, 1, 1), 1),
    "half scale": (70, 45, np.eye(3)[:2], (5 / W, 7 / H, 145 / W, 97 / H), 1),
    "a third, odd offsets": (33, 29, np.eye(3)[:2], (0.123, 0.071, 0.777, 0.93), 1),
    "finer than native": (97, 61, np.eye(3)[:2], (0.3, 0.4, 0.45, 0.5), 1),
    "beyond the unit square": (50, 40, np.eye(3)[:2], (-0.2, -0.1, 1.3, 1.25), 1),
    "mirrored and shifted": (40, 30, np.array([[-1.0, 0, 1.0], [0, 0.5, 0.2]]), (0, 0, 1, 1), 1),
    "supersampled 3×": (30, 20, np.eye(3)[:2], (0.1, 0.2, 0.6, 0.7), 3),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lattice")
    return {label: grid_folder(tmp, f"m{i}", enc, fp16) for i, (label, (enc, fp16)) in enumerate(STORAGE.items())}


@pytest.mark.parametrize("storage", list(STORAGE))
@pytest.mark.parametrize("view", list(VIEWS))
def test_a_lattice_render_equals_the_whole_graph(models, storage, view):
    runtime = models[storage]
    assert runtime.lattice is not None
    w, h, matrix, viewport, k = VIEWS[view]
    spec = RenderSpec(w, h, matrix, viewport, supersample=k)
    sample = lattice_sampler(runtime, spec)
    assert sample is not None
    diff = np.abs(rgb(sample, spec) - rgb(plain_sampler(runtime.render_rgb, spec), spec)).max()
    assert diff <= PARITY, diff


def test_the_8bit_lattice_keeps_the_codes_and_the_native_level(models):
    lattice = models["8-bit, native luma"].lattice
    assert [lv.table.dtype for lv in lattice.levels] == [np.uint8] * len(lattice.levels)
    assert lattice.levels[-1].size == (W, H) and lattice.levels[-1].features == 1
    assert all(lv.scale is not None for lv in lattice.levels)
    assert models["float32"].lattice.levels[0].table.dtype == np.float32


def test_pixels_with_a_background_match_too(models):
    runtime = models["8-bit, native luma"]
    spec = RenderSpec(60, 50, np.eye(3)[:2], (-0.3, -0.2, 1.2, 1.1), background=Background.parse("transparent"))
    outs = []
    for sample in (lattice_sampler(runtime, spec), plain_sampler(runtime.render_rgb, spec)):
        out = new_image(spec)
        for t in tiles(spec.height, spec.width, 1, 1024):
            render_tile(spec, t, sample(t), out)
        outs.append(out.astype(int))
    assert np.abs(outs[0] - outs[1]).max() <= 1


def test_rotated_and_sheared_renders_keep_the_plain_path(models):
    runtime = models["8-bit, native luma"]
    c, s = np.cos(0.3), np.sin(0.3)
    assert lattice_sampler(runtime, RenderSpec(32, 32, np.array([[c, -s, 0.1], [s, c, 0.0]]))) is None
    assert lattice_sampler(runtime, RenderSpec(32, 32, np.array([[0.0, 1.0, 0], [1.0, 0.0, 0]]))) is None


def test_hashed_grids_and_fourier_models_have_no_lattice(tmp_path):
    hashed = grid_folder(tmp_path, "hashed", {"grid_log2_table": 10, "grid_levels": 3}, True)
    assert hashed.lattice is None
    assert lattice_sampler(hashed, RenderSpec(16, 16, np.eye(3)[:2])) is None
    cfg = ImageModelConfig(width=16, depth=2, encoding=EncodingConfig("gaussian", scale=5.0, features=16))
    export_image_model(ImageINR(cfg).eval(), FitConfig(model=cfg), tmp_path / "f", {}, {}, {}, np.zeros((4, 4, 3)))
    fourier = runtime_for(tmp_path / "f", read_spec(tmp_path / "f"), 1, RuntimeOptions())
    assert fourier.load() and fourier.lattice is None


def test_a_lattice_that_disagrees_with_its_graph_is_refused(tmp_path, monkeypatch, caplog):
    real = lattice_module.read_file

    def shifted(path):
        levels, head = real(path)
        levels[0] = dataclasses.replace(levels[0], table=np.roll(levels[0].table, 1, axis=2))
        return levels, head

    monkeypatch.setattr(lattice_module, "read_file", shifted)
    runtime = grid_folder(tmp_path, "off", {"grid_table_bits": 8, "grid_finest_features": 1}, True)
    assert runtime.ready and runtime.lattice is None
    assert "lattice renders off" in caplog.text


def test_positions_round_as_the_graph_does():
    # pixel centres of the native level: the first cell is the pixel itself (weight 0) or the one before it (1)
    centres = (np.arange(W) + 0.5) / W
    first, weight = positions(centres, W)
    value = np.where(weight > 0.5, first + 1, first) + np.where(weight > 0.5, weight - 1, weight)
    assert np.abs(value - np.arange(W)).max() < 1e-3
    # outside the unit square: clamped to the border cells, weight 0
    first, weight = positions(np.array([-5.0, 0.0, 1.0, 7.0]), 10)
    assert list(first) == [0, 0, 9, 9] and list(weight) == [0, 0, 0, 0]


def test_a_head_of_other_operators_runs_between_transposes(tmp_path):
    # a SineKAN head on the grid: its nodes are not Gemms and elementwise ones, so the head keeps its own layout
    cfg = ImageModelConfig(
        model="sinekan",
        depth=2,
        width=8,
        grid_size=4,
        encoding=EncodingConfig(name="grid", image_size=[W, H], grid_table_bits=16),
    )
    torch.manual_seed(0)
    model = ImageINR(cfg).eval()
    preview = np.zeros((4, 4, 3), np.float32)
    export_image_model(model, FitConfig(model=cfg), tmp_path / "k", {"size": [W, H]}, {}, {}, preview)
    runtime = runtime_for(tmp_path / "k", read_spec(tmp_path / "k"), 1, RuntimeOptions())
    assert runtime.load(), runtime.error
    assert runtime.lattice is not None
    ops = [
        n.op_type
        for n in onnx.load_from_string(read_lattice(onnx.load(str(runtime.version_dir / "model.onnx")))[1]).graph.node
    ]
    assert ops[0] == "Transpose" and ops[-1] == "Transpose"
    w, h, matrix, viewport, k = VIEWS["a third, odd offsets"]
    spec = RenderSpec(w, h, matrix, viewport, supersample=k)
    diff = np.abs(rgb(lattice_sampler(runtime, spec), spec) - rgb(plain_sampler(runtime.render_rgb, spec), spec)).max()
    assert diff <= PARITY, diff


def test_the_server_reads_a_lattice_without_the_onnx_package(models):
    # the lattice's graph is read with protobuf alone (modelrepo/onnxfile.py): `import onnx` costs a server ~10 MiB
    # resident, and the service imported it only for this
    path = models["8-bit, native luma"].version_dir / "model.onnx"
    code = (
        "import sys, service.app\n"
        "from service.engine.lattice_graph import read_file\n"
        f"levels, head = read_file({str(path)!r})\n"
        "assert len(levels) == 8 and head\n"
        "print(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
