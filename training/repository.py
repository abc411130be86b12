"""Write a model directory into the model repository, atomically.

    models/NAME/1/model.onnx      the network
    models/NAME/config.pbtxt      Triton model config (the folder is a valid Triton repo)
    models/NAME/metadata.json     task, architecture, metrics, sha256, provenance
    models/NAME/preview.png       optional

Everything is written to a temporary sibling directory first and renamed into
place at the end, so a failure never leaves a half-written model behind.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import UsageError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ONNX_TO_TRITON = {"FP32": "TYPE_FP32", "INT64": "TYPE_INT64", "UINT8": "TYPE_UINT8"}


@dataclass
class TensorSpec:
    name: str
    datatype: str        # V2 protocol datatype, e.g. FP32
    shape: list[int]     # full shape, -1 for dynamic

    def to_dict(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": self.shape}


def check_out_dir(out: str | Path) -> Path:
    """Validate --out before any training starts: its last part is the model name."""
    path = Path(out)
    if not NAME_RE.match(path.name):
        raise UsageError(f"--out must end in a model name of letters, digits, '_', '-' or '.', got '{path.name}'")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out '{out}' exists and is not a directory")
    return path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def triton_config(name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], max_batch_size: int = 0,
                  dynamic_batching_us: int | None = None) -> str:
    """Triton config.pbtxt text. With max_batch_size > 0 the batch dimension is implicit
    and dims omit it, as Triton requires."""

    def dims(spec: TensorSpec) -> str:
        shape = spec.shape[1:] if max_batch_size > 0 else spec.shape
        return ", ".join(str(d) for d in shape)

    def block(kind: str, specs: list[TensorSpec]) -> str:
        items = [
            f'  {{\n    name: "{s.name}"\n    data_type: {ONNX_TO_TRITON[s.datatype]}\n    dims: [ {dims(s)} ]\n  }}'
            for s in specs
        ]
        return f"{kind} [\n" + ",\n".join(items) + "\n]\n"

    text = f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
    text += block("input", inputs) + block("output", outputs)
    if dynamic_batching_us is not None:
        text += f"dynamic_batching {{\n  max_queue_delay_microseconds: {dynamic_batching_us}\n}}\n"
    text += 'version_policy: { latest: { num_versions: 1 } }\n'
    return text


def command_line() -> str:
    return "python -m training " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_model_dir(out: Path, *, task: str, onnx_bytes: bytes, inputs: list[TensorSpec],
                    outputs: list[TensorSpec], metadata: dict, max_batch_size: int = 0,
                    dynamic_batching_us: int | None = None,
                    extras: Callable[[Path], None] | None = None) -> dict:
    """Write the whole model directory atomically; return the metadata written.

    `extras(tmpdir)` may add files (a preview PNG, a plot) inside the temporary directory.
    """
    out = Path(out)
    name = out.name
    meta = {
        "name": name,
        "task": task,
        "version": 1,
        "inputs": [s.to_dict() for s in inputs],
        "outputs": [s.to_dict() for s in outputs],
        **metadata,
        "onnx_sha256": sha256_bytes(onnx_bytes),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o755 & ~_umask())  # mkdtemp makes 0700; a model folder is readable like any other
        (tmp / "1").mkdir()
        (tmp / "1" / "model.onnx").write_bytes(onnx_bytes)
        (tmp / "config.pbtxt").write_text(triton_config(name, inputs, outputs, max_batch_size, dynamic_batching_us))
        if extras is not None:
            extras(tmp)
        (tmp / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            old = out.with_name(f".{name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta
