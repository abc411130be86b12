"""Non-square image models for the geometry tests, made by the real training code.

`make_nonsquare_model` fits the training package's ImageINR (Gaussian Fourier features → MLP) to a small
W×H crop of scikit-image's `chelsea` for a few hundred steps, exports it with the training export
(`training.export.export_onnx`, parity-checked against torch) and writes it through
`training.repository.write_model_dir` (modelrepo.write_version) with `source.size` = [W, H]. No separable
body is written, so renders go through the whole graph, as the grid models' do: sampling the same coordinates
gives the same pixels whatever the tile shapes. `with_onnx_size` adds the export's `image_width` /
`image_height` metadata_props to such an ONNX graph.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

W, H = 40, 24  # the fixture's native pixel grid: wider than tall


def target(width: int, height: int) -> np.ndarray:
    """[H, W, 3] float32 in [0,1]: a crop of chelsea (the cat) resized to width × height."""
    from PIL import Image
    from skimage import data

    img = Image.fromarray(data.chelsea()).resize((width, height), Image.LANCZOS)
    return np.asarray(img, np.float32) / 255.0


def with_onnx_size(onnx_bytes: bytes, width: int, height: int) -> bytes:
    """The graph with metadata_props image_width / image_height, as the training export writes them."""
    import onnx

    proto = onnx.load_from_string(onnx_bytes)
    keep = [p for p in proto.metadata_props if p.key not in ("image_width", "image_height")]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    for key, value in (("image_width", width), ("image_height", height)):
        proto.metadata_props.add(key=key, value=str(value))
    return proto.SerializeToString()


def make_nonsquare_model(
    out: Path, size: tuple[int, int] = (W, H), steps: int = 300, onnx_size: tuple[int, int] | None = None
) -> dict:
    """Fit and write an image model of native `size` (W, H); `onnx_size` writes that geometry into the
    ONNX metadata (the recorded one when None). Returns the version's metadata as written."""
    import torch

    from training.encodings import EncodingConfig
    from training.export import check_parity, export_onnx
    from training.fit_image import FitConfig, evaluate, train
    from training.image_models import ImageModelConfig, count_parameters
    from training.repository import TensorSpec, write_model_dir

    torch.set_num_threads(1)
    w, h = size
    img = target(w, h)
    cfg = FitConfig(
        image="chelsea",
        size=max(w, h),
        steps=steps,
        lr=5e-3,
        batch_size=0 if w * h <= 16384 else 4096,
        protocol="full",
        device="cpu",
        progress=False,
        model=ImageModelConfig(depth=3, width=32, encoding=EncodingConfig(scale=6.0, features=32)),
    )
    model, history = train(cfg, img)
    metrics, _ = evaluate(model, img, "full")
    onnx_bytes = export_onnx(model, torch.rand(8, 2), "coords", ["rgb"])
    probe = np.random.default_rng(0).random((1024, 2), dtype=np.float32) * 1.5 - 0.25
    parity = check_parity(model, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)
    onnx_bytes = with_onnx_size(onnx_bytes, *(onnx_size or size))
    meta = {
        "description": f"a {w}×{h} crop of chelsea, fitted for the geometry tests",
        "architecture": {**cfg.model.to_dict(), "parameters": count_parameters(model)},
        "encoding": cfg.model.encoding.to_dict(),
        "source": {"image": "chelsea", "size": [w, h]},
        "training": {"steps": steps, "lr": cfg.lr, "protocol": "full", **history},
        "metrics": metrics,
        "export": {"opset": 17, "max_abs_diff_vs_torch": parity},
    }
    return write_model_dir(
        out,
        task="image",
        onnx_bytes=onnx_bytes,
        inputs=[TensorSpec("coords", "FP32", [-1, 2])],
        outputs=[TensorSpec("rgb", "FP32", [-1, 3])],
        metadata=meta,
    )


def add_version_with_size(model: Path, size: tuple[int, int], onnx_size: tuple[int, int] | None = None) -> int:
    """Copy the model's latest version as the next one, its `source.size` set to `size` and its ONNX metadata
    to `onnx_size` (the same graph otherwise); returns the new version number."""
    from modelrepo import sha256_bytes, version_numbers

    last = version_numbers(model)[-1]
    new = model / str(last + 1)
    shutil.copytree(model / str(last), new)
    onnx_bytes = with_onnx_size((new / "model.onnx").read_bytes(), *(onnx_size or size))
    (new / "model.onnx").write_bytes(onnx_bytes)
    meta = json.loads((new / "metadata.json").read_text())
    meta.update(version=last + 1, onnx_sha256=sha256_bytes(onnx_bytes), source={**meta["source"], "size": list(size)})
    (new / "metadata.json").write_text(json.dumps(meta))
    return last + 1
