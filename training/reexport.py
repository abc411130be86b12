"""`python -m training reexport-image models/NAME`: re-export an image model from its ONNX file.

For a model folder without a checkpoint (the bundled `astronaut`): rebuild the torch module from
metadata.json's `architecture` and the ONNX initializers (they carry the state_dict's names), check
that it reproduces the old graph, and write the folder again with the current exporter — today's
Concat-free encoding graph and the separable body (`1/body.onnx`, metadata `separable`).
Everything else in metadata.json (training, metrics, source) and preview.png are kept.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import torch

from .errors import UsageError
from .export import check_parity, export_onnx, ort_session
from .image_models import ImageINR, ImageModelConfig, fold_batchnorm
from .repository import TensorSpec, command_line, write_model_dir
from .separable import write_separable

log = logging.getLogger(__name__)
# The old graph computed cos p directly, the new one sin(p + π/2): float32 rounds p + π/2 by half an
# ulp of |p|, so the two graphs agree to about that much, not to the export gate's 1e-5.
REBUILD_ATOL = 1e-4
WRITTEN = {"name", "task", "version", "inputs", "outputs", "onnx_sha256", "created", "command", "separable"}


def load_from_onnx(folder: Path) -> tuple[torch.nn.Module, dict, bytes]:
    """(the rebuilt torch model, metadata, the old ONNX bytes) of an image model folder."""
    import onnx
    from onnx import numpy_helper

    try:
        meta = json.loads((folder / "metadata.json").read_text())
        old = (folder / str(meta.get("version", 1)) / "model.onnx").read_bytes()
    except (OSError, ValueError) as e:
        raise UsageError(f"{folder} is not a readable model folder: {e}") from None
    if meta.get("task") != "image" or "architecture" not in meta:
        raise UsageError(f"{folder}: not an image model with an 'architecture' in metadata.json")
    arch = {k: v for k, v in meta["architecture"].items() if k not in ("parameters", "batchnorm_folded")}
    model = ImageINR(ImageModelConfig.from_dict(arch))
    if arch.get("model") == "mlp-bn":
        fold_batchnorm(model)  # the exported graph holds folded weights
    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in onnx.load_from_string(old).graph.initializer}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing:
        raise UsageError(f"{folder}: the ONNX file lacks the weights {missing[:4]}; it was not written by "
                         "this exporter")
    return model.eval(), meta, old


def reexport_image(folder: Path) -> dict:
    folder = Path(folder)
    model, meta, old = load_from_onnx(folder)
    probe = np.random.default_rng(0).random((4096, 2), dtype=np.float32) * 1.5 - 0.25
    with torch.no_grad():
        ref = ort_session(old).run(["rgb"], {"coords": probe})[0]
        diff = float(np.max(np.abs(model(torch.from_numpy(probe)).numpy() - ref)))
    if not diff <= REBUILD_ATOL:
        raise UsageError(f"{folder}: the rebuilt model differs from its ONNX file by {diff:.3g} > {REBUILD_ATOL}")
    onnx_bytes = export_onnx(model, torch.rand(8, 2), "coords", ["rgb"])
    parity = check_parity(model, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)
    keep = {k: v for k, v in meta.items() if k not in WRITTEN}
    keep["export"] = {**meta.get("export", {}), "max_abs_diff_vs_torch": parity}
    keep["reexport"] = {"from_onnx_sha256": meta.get("onnx_sha256"), "max_abs_diff_vs_old_onnx": diff,
                        "fit_command": meta.get("command"), "command": command_line()}
    write_body = write_separable(model, probe, keep)
    preview = folder / str(meta.get("preview", "preview.png"))

    def extras(d: Path) -> None:
        if preview.is_file():
            shutil.copy(preview, d / preview.name)
        write_body(d)

    out = write_model_dir(folder, task="image", onnx_bytes=onnx_bytes,
                          inputs=[TensorSpec("coords", "FP32", [-1, 2])], outputs=[TensorSpec("rgb", "FP32", [-1, 3])],
                          metadata=keep, extras=extras)
    return out


def register(sub) -> None:
    p = sub.add_parser("reexport-image", help="re-export an image model folder from its ONNX weights")
    p.add_argument("folder", help="model folder, e.g. models/astronaut")
    p.set_defaults(func=lambda args: (reexport_image(Path(args.folder)), 0)[1])
