"""Run a version's `model_warmup` (config.pbtxt, modelrepo/warmup.py) before it is ready, as Triton does.

A version loads, then runs each warmup `count` times on `batch_size` rows of zero, random or file data; only
then is it ready, and only a ready version is swapped in by a reload (service/engine/registry.py). A warmup
that names an input the model does not have, a datatype or dims that disagree with the model, a missing or
short `warmup/` file, or a run that fails makes the version failed, with that reason. The runs are not
counted in the inference statistics (Triton does not count them either).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np

from modelrepo import ModelSpec
from modelrepo.warmup import Warmup, WarmupInput

from ..errors import ModelLoadError

log = logging.getLogger(__name__)
DTYPES = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT64": np.int64,
    "INT32": np.int32,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}


def warmup_array(w: Warmup, i: WarmupInput, spec: ModelSpec, folder: Path, rng: np.random.Generator) -> np.ndarray:
    """The input's [batch_size, *dims] data; ModelLoadError naming the warmup and input when it cannot be made."""
    where = f"model_warmup '{w.name}' input '{i.name}'"
    declared = next((t for t in spec.inputs if t.name == i.name), None)
    if declared is None:
        raise ModelLoadError(
            f"{where}: the model has no input '{i.name}'; its inputs: {', '.join(t.name for t in spec.inputs)}"
        )
    want = declared.shape[1:]
    if (
        i.datatype != declared.datatype
        or len(i.dims) != len(want)
        or any(w_ >= 0 and d != w_ for d, w_ in zip(i.dims, want))
    ):
        raise ModelLoadError(
            f"{where}: {i.datatype} {list(i.dims)} does not match the model's input {declared.datatype} {list(want)}"
        )
    shape = (w.rows, *i.dims)
    dtype = np.dtype(DTYPES.get(i.datatype, np.float32))
    if i.kind == "zero_data":
        return np.zeros(shape, dtype)
    if i.kind == "random_data":
        return rng.random(shape).astype(dtype)
    path = folder / "warmup" / i.file
    if Path(i.file).is_absolute() or ".." in Path(i.file).parts:
        raise ModelLoadError(f"{where}: input_data_file '{i.file}' must be a name inside the model's warmup/ folder")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelLoadError(f"{where}: input_data_file warmup/{i.file}: {e.strerror or e}") from None
    need = math.prod(i.dims) * dtype.itemsize
    if len(data) < need:
        raise ModelLoadError(
            f"{where}: warmup/{i.file} holds {len(data)} bytes; one row of {i.datatype} {list(i.dims)} needs {need}"
        )
    row = np.frombuffer(data[:need], dtype).reshape(i.dims)
    return np.broadcast_to(row, shape).copy()  # Triton repeats the file's tensor for every batch row


def run_warmups(session, spec: ModelSpec, folder: Path, version: int) -> float:
    """Run every warmup of `spec` on the onnxruntime `session`; the seconds it took. Raises ModelLoadError."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    outputs = [o.name for o in spec.outputs]
    for w in spec.warmups:
        feed = {i.name: warmup_array(w, i, spec, folder, rng) for i in w.inputs}
        missing = [t.name for t in spec.inputs if t.name not in feed]
        if missing:
            raise ModelLoadError(f"model_warmup '{w.name}' gives no data for input '{missing[0]}'")
        for _ in range(w.runs):
            try:
                session.run(outputs, feed)
            except Exception as e:  # onnxruntime raises several types
                first = (str(e).strip().splitlines() or [e.__class__.__name__])[0]
                raise ModelLoadError(f"model_warmup '{w.name}' failed: {first[:300]}") from None
    seconds = time.perf_counter() - start
    if spec.warmups:
        log.info("model %s version %d: %d warmup(s) in %.3f s", spec.name, version, len(spec.warmups), seconds)
    return seconds
