"""`python -m training reexport-image`: a model folder exported before the separable body (its graph
with the Concat, no body.onnx) is rebuilt from its ONNX weights and rewritten as version 1 with the
Concat-free graph and the body; other folders get one line `error: …` and exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from training.encodings import EncodingConfig
from training.export import export_onnx
from training.image_models import ImageINR, ImageModelConfig
from training.repository import TensorSpec, write_model_dir

ROOT = Path(__file__).resolve().parents[2]


class OldSinCos(torch.nn.Module):
    """The encoding as exported before: [sin 2πvB, cos 2πvB] through a Concat."""

    def __init__(self, B):
        super().__init__()
        self.register_buffer("B", B)

    def forward(self, v):
        p = 2 * math.pi * (v @ self.B)
        return torch.cat([torch.sin(p), torch.cos(p)], dim=-1)


def old_style_folder(out: Path) -> ImageINR:
    torch.manual_seed(0)
    cfg = ImageModelConfig(width=16, depth=2, encoding=EncodingConfig("gaussian", features=8, scale=10.0))
    model = ImageINR(cfg).eval()
    model.encoding = OldSinCos(model.encoding.B)
    onnx_bytes = export_onnx(model, torch.rand(8, 2), "coords", ["rgb"])
    arch = {**cfg.to_dict(), "parameters": 1, "batchnorm_folded": False}
    write_model_dir(
        out,
        task="image",
        onnx_bytes=onnx_bytes,
        inputs=[TensorSpec("coords", "FP32", [-1, 2])],
        outputs=[TensorSpec("rgb", "FP32", [-1, 3])],
        metadata={"description": "old", "architecture": arch, "metrics": {"full_psnr": 1.0}},
    )
    return model


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training", "reexport-image", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_old_folder_is_reexported_with_the_body_and_without_the_concat(tmp_path):
    folder = tmp_path / "m"
    old = old_style_folder(folder)
    assert "Concat" in {n.op_type for n in onnx.load(str(folder / "1" / "model.onnx")).graph.node}
    r = run(str(folder))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["body.onnx", "metadata.json", "model.onnx"]
    assert not (folder / "2").exists() and not list(tmp_path.glob(".*"))
    meta = json.loads((folder / "1" / "metadata.json").read_text())
    assert meta["metrics"] == {"full_psnr": 1.0} and meta["reexport"]["max_abs_diff_vs_old_onnx"] < 1e-4
    assert meta["separable"]["features"] == 16 and len(meta["separable"]["P"]) == 16
    graph = onnx.load(str(folder / "1" / "model.onnx")).graph
    assert "Concat" not in {n.op_type for n in graph.node}
    coords = np.random.default_rng(0).random((64, 2), dtype=np.float32)
    new = ort.InferenceSession(str(folder / "1" / "model.onnx")).run(["rgb"], {"coords": coords})[0]
    with torch.no_grad():
        assert np.abs(new - old(torch.from_numpy(coords)).numpy()).max() < 1e-4


def test_what_cannot_be_reexported_is_one_line_exit_2(tmp_path):
    r = run(str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    r = run(str(ROOT / "models" / "digits"))
    assert r.returncode == 2 and "image models only" in r.stderr and r.stderr.count("\n") == 1


def test_a_grid_model_with_8bit_tables_is_reexported_as_it_was_stored(tmp_path):
    """The bundled dandelion: 8-bit tables (NAME__u8, __scale, __low) are read back, and the new file stores them
    as uint8 again, so it is no larger and answers as the old one did."""
    import shutil

    folder = tmp_path / "dandelion"
    shutil.copytree(ROOT / "models" / "dandelion", folder)
    old = folder / "1" / "model.onnx"
    old_bytes, old_size = old.read_bytes(), old.stat().st_size
    r = subprocess.run(
        [sys.executable, "-m", "training", "reexport-image", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    new = folder / "1" / "model.onnx"
    assert new.stat().st_size <= old_size * 1.01
    assert any(i.name.endswith("__u8") for i in onnx.load(str(new)).graph.initializer)
    coords = np.random.default_rng(1).random((2000, 2), dtype=np.float32)
    a = ort.InferenceSession(old_bytes).run(["rgb"], {"coords": coords})[0]
    b = ort.InferenceSession(str(new)).run(["rgb"], {"coords": coords})[0]
    assert np.abs(a - b).max() < 1e-4
    meta = json.loads((folder / "1" / "metadata.json").read_text())
    assert meta["reexport"]["max_abs_diff_vs_old_onnx"] <= 1e-4 and meta["export"]["tables"]["u8_tables"] == 8
