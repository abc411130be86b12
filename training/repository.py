"""Write a trained model into the model repository, through the shared contract (`modelrepo`).

    models/NAME/config.pbtxt      Triton model config, generated from the spec
    models/NAME/metadata.json     the spec: task, tensors, coordinate convention, description
    models/NAME/N/model.onnx      version N of the network
    models/NAME/N/metadata.json   version N: sha256, architecture, metrics, provenance
    models/NAME/N/preview.png     optional

A new --out folder gets version 1; an existing model gets the next version beside the others.
Everything appears atomically (modelrepo.write_version), so a failure never leaves a
half-written model behind and a serving process never sees half a version. `--out s3://…/NAME` writes into a
repository on S3 the same way: the version's files, then its marker (modelrepo/s3publish.py).
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from modelrepo import (
    NAME_RE,
    Guard,
    LocationError,
    ModelSpec,
    SpecError,
    StorageUnavailable,
    Target,
    Tensor,
    is_s3,
    open_target,
    portable_command,
    sha256_bytes,
)

from .errors import UsageError

__all__ = ["TensorSpec", "check_out_dir", "sha256_bytes", "write_model_dir", "command_line"]


@dataclass
class TensorSpec:
    name: str
    datatype: str  # V2 protocol datatype, e.g. FP32
    shape: list[int]  # full shape, -1 for dynamic

    def tensor(self) -> Tensor:
        return Tensor(self.name, self.datatype, tuple(self.shape))


def check_out_dir(out: str | Path) -> Path | Target:
    """Validate --out before any training starts: its last part is the model name (a folder, or s3://…/NAME)."""
    if is_s3(str(out)):
        try:
            return open_target(str(out))
        except (LocationError, SpecError) as e:
            raise UsageError(f"--out: {e}") from None
    path = Path(out)
    if not NAME_RE.match(path.name):
        raise UsageError(f"--out must end in a model name of letters, digits, '_', '-' or '.', got '{path.name}'")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out '{out}' exists and is not a directory")
    return path


def command_line() -> str:
    return "python -m training " + portable_command(sys.argv[1:])


def write_model_dir(
    out: Path | Target,
    *,
    task: str,
    onnx_bytes: bytes,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    metadata: dict,
    max_batch_size: int = 0,
    dynamic_batching_us: int | None = None,
    extras: Callable[[Path], None] | None = None,
    guard: Guard | None = None,
) -> dict:
    """Write the model (its next version) atomically; return the version's metadata as written,
    with `name`, `task` and `version`. `max_batch_size` 0 takes the task's default row limit.

    `extras(version_dir)` may add files (a preview PNG) to the version folder before it appears. `guard`: a fit's
    access guard (modelrepo.access.Guard), checked as the version is written.
    """
    out = out if isinstance(out, Target) else Path(out)
    meta = dict(metadata)
    description = meta.get("description")
    spec = ModelSpec.for_task(
        out.name,
        task,
        inputs=[s.tensor() for s in inputs],
        outputs=[s.tensor() for s in outputs],
        max_batch_size=max_batch_size or None,
        max_queue_delay_us=dynamic_batching_us,
        metadata={"description": description} if isinstance(description, str) else {},
    )
    if isinstance(meta.get("coordinates"), str):
        spec = spec.with_(coordinates=meta["coordinates"])
    meta.update(created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), command=command_line())
    try:
        written = open_target(out).write_version(spec, onnx_bytes, meta, extras, guard)
    except (SpecError, StorageUnavailable) as e:
        raise UsageError(f"--out '{out}': {e}") from None
    return {"name": out.name, "task": task, **written.record.to_json()}
