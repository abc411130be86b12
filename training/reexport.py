"""`python -m training reexport-image models/NAME`: re-export an image model from its ONNX file.

For a model folder without a checkpoint (the bundled `astronaut`): rebuild the torch module from
the latest version's `architecture` and its ONNX initializers (they carry the state_dict's names),
check that it reproduces the old graph, and write the folder again, as version 1, with the current
exporter — today's Concat-free encoding graph and the separable body (`1/body.onnx`, metadata
`separable`) and the encoding's storage (a grid's 8-bit tables packed as uint8 in memory,
training/encodings/grid_store.py; metadata `export.tables`). Everything else in the version's
metadata.json (training, metrics, source), the ONNX file's metadata_props (image_width, image_height)
and preview.png are kept.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from modelrepo import SpecError, read_spec, tablecode, version_numbers

from .encodings import encoding_for
from .errors import UsageError
from .export import check_parity, export_onnx, ort_session, set_metadata_props
from .fp16 import store_weights_fp16
from .image_models import ImageINR, ImageModelConfig, fold_batchnorm
from .repository import TensorSpec, command_line, write_model_dir
from .separable import write_separable

log = logging.getLogger(__name__)
# The old graph computed cos p directly, the new one sin(p + π/2): float32 rounds p + π/2 by half an
# ulp of |p|, so the two graphs agree to about that much, not to the export gate's 1e-5.
REBUILD_ATOL = 1e-4
WRITTEN = {"name", "task", "version", "onnx_sha256", "created", "command", "separable", "reexport"}


def load_from_onnx(folder: Path) -> tuple[torch.nn.Module, dict, bytes, Path]:
    """(the rebuilt torch model, the latest version's metadata, its ONNX bytes, its folder)."""
    import onnx

    versions = version_numbers(folder) if folder.is_dir() else []
    if not versions:
        raise UsageError(f"{folder} is not a model folder with a version (N/model.onnx)")
    try:
        task = read_spec(folder).task
    except SpecError as e:
        raise UsageError(f"{folder}: {e}") from None
    if task != "image":
        raise UsageError(f"{folder} is a '{task}' model; reexport-image re-exports image models only")
    vdir = folder / str(versions[-1])
    try:
        meta = json.loads((vdir / "metadata.json").read_text(encoding="utf-8"))
        old = (vdir / "model.onnx").read_bytes()
    except (OSError, ValueError) as e:
        raise UsageError(f"{vdir} is not a readable model version: {e}") from None
    if "architecture" not in meta:
        raise UsageError(f"{vdir}: not an image model with an 'architecture' in metadata.json")
    arch = {k: v for k, v in meta["architecture"].items() if k not in ("parameters", "batchnorm_folded")}
    model = ImageINR(ImageModelConfig.from_dict(arch))
    if arch.get("model") == "mlp-bn":
        fold_batchnorm(model)  # the exported graph holds folded weights
    missing, _ = model.load_state_dict(stored_weights(onnx.load_from_string(old).graph), strict=False)
    if missing:
        raise UsageError(
            f"{vdir}: the ONNX file lacks the weights {missing[:4]}; only a graph that keeps them "
            "by name (encoding.B, body.N.weight) can be re-exported"
        )
    return model.eval(), meta, old, vdir


def stored_weights(graph) -> dict[str, torch.Tensor]:
    """The graph's initializers by their state_dict names, as float32: float16 storage (`NAME__fp16`,
    training/fp16.py) and 8-bit tables (`NAME__u8` · `NAME__scale` + `NAME__low`, computed in float32 as the
    graph's Cast → Mul → Add does; e.g. training/encodings/grid_quant.py) read back."""
    from onnx import numpy_helper

    arrays = tablecode.decoded({i.name: numpy_helper.to_array(i) for i in graph.initializer})  # coded tables
    out = {}
    for name, a in arrays.items():
        if name.endswith("__fp16"):
            out[name.removesuffix("__fp16")] = a.astype(np.float32)
        elif name.endswith("__u8"):
            base = name.removesuffix("__u8")
            out[base] = a.astype(np.float32) * arrays[f"{base}__scale"] + arrays[f"{base}__low"]
        elif not name.endswith(("__scale", "__low")):
            out[name] = a
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in out.items()}


def stored_as_before(onnx_bytes: bytes, model: ImageINR, export: dict) -> tuple[bytes, dict]:
    """The new graph with the storage the old one had: the encoding's (8-bit tables, held so in memory: e.g.
    training/encodings/grid_store.py), float16 weights (both lossless here, the values being already rounded to
    them); and the encoding's storage report."""
    enc = model.config.encoding
    onnx_bytes, stored = encoding_for(enc).store(enc, model, onnx_bytes)
    if str(export.get("weights", "")).startswith("float16"):
        onnx_bytes, _ = store_weights_fp16(onnx_bytes)
    return onnx_bytes, stored


def metadata_props(onnx_bytes: bytes) -> dict[str, str]:
    """The graph's metadata_props (e.g. image_width, image_height: the fitted pixel grid)."""
    import onnx

    return {p.key: p.value for p in onnx.load_from_string(onnx_bytes).metadata_props}


def reexport_image(folder: Path) -> dict:
    """Rewrite the model folder as version 1 of today's export; the old folder is replaced atomically."""
    folder = Path(folder)
    model, meta, old, vdir = load_from_onnx(folder)
    probe = np.random.default_rng(0).random((4096, 2), dtype=np.float32) * 1.5 - 0.25
    with torch.no_grad():
        ref = ort_session(old).run(["rgb"], {"coords": probe})[0]
        diff = float(np.max(np.abs(model(torch.from_numpy(probe)).numpy() - ref)))
    if not diff <= REBUILD_ATOL:
        raise UsageError(f"{folder}: the rebuilt model differs from its ONNX file by {diff:.3g} > {REBUILD_ATOL}")
    onnx_bytes, stored = stored_as_before(
        export_onnx(model, torch.rand(8, 2), "coords", ["rgb"]), model, meta.get("export", {})
    )
    onnx_bytes = set_metadata_props(onnx_bytes, metadata_props(old))
    parity = check_parity(model, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)
    keep = {k: v for k, v in meta.items() if k not in WRITTEN}
    keep["export"] = {**meta.get("export", {}), **stored, "max_abs_diff_vs_torch": parity}
    keep["reexport"] = {
        "from_onnx_sha256": meta.get("onnx_sha256"),
        "max_abs_diff_vs_old_onnx": diff,
        "fit_command": meta.get("reexport", {}).get("fit_command") or meta.get("command"),
        "command": command_line(),
    }
    write_body = write_separable(model, probe, keep)
    preview = vdir / str(meta.get("preview", "preview.png"))

    def extras(d: Path) -> None:
        if preview.is_file():
            shutil.copy(preview, d / preview.name)
        write_body(d)

    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.reexport-", dir=folder.parent))
    try:
        out = write_model_dir(
            tmp / folder.name,
            task="image",
            onnx_bytes=onnx_bytes,
            inputs=[TensorSpec("coords", "FP32", [-1, 2])],
            outputs=[TensorSpec("rgb", "FP32", [-1, 3])],
            metadata=keep,
            extras=extras,
        )
        old_dir = folder.with_name(f".{folder.name}.old")
        shutil.rmtree(old_dir, ignore_errors=True)
        folder.rename(old_dir)
        (tmp / folder.name).rename(folder)
        shutil.rmtree(old_dir, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def register(sub) -> None:
    p = sub.add_parser("reexport-image", help="re-export an image model folder from its ONNX weights, as version 1")
    p.add_argument("folder", help="model folder, e.g. models/astronaut")
    p.set_defaults(func=lambda args: (reexport_image(Path(args.folder)), 0)[1])
