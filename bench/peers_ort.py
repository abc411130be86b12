"""What every peer adapter shares: the bundled models as onnxruntime sessions, and the JSON answers.

Runs inside the peers' own virtual environment, so it needs numpy and onnxruntime only (no service,
no torch). The answers have the shape and the rounding of this service's v1 API
(`{"predictions": [...]}`, `{"rgb": [...]}`, six decimals), so that every server writes the same bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

MODELS_ENV = "INR_PEER_MODELS"
THREADS_ENV = "INR_PEER_THREADS"


def session(path: Path, threads: int | None = None) -> ort.InferenceSession:
    """A CPU session with `threads` intra-op threads (default: $INR_PEER_THREADS, else 1)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or int(os.environ.get(THREADS_ENV, "1"))
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def model_path(name: str) -> Path:
    """models/NAME/1/model.onnx under $INR_PEER_MODELS (default: ./models)."""
    return Path(os.environ.get(MODELS_ENV, "models")) / name / "1" / "model.onnx"


class Models:
    """The image model (coords → rgb) and the digit classifier (images → probabilities)."""

    def __init__(self, image: str = "astronaut", digits: str = "digits"):
        self.image, self.digits = session(model_path(image)), session(model_path(digits))

    def query(self, coords) -> dict:
        x = np.asarray(coords, dtype=np.float32).reshape(-1, 2)
        (rgb,) = self.image.run(["rgb"], {"coords": x})
        return {"rgb": rounded(rgb)}

    def classify(self, images) -> dict:
        x = np.asarray(images, dtype=np.float32).reshape(-1, 1, 28, 28)
        (probs,) = self.digits.run(["probabilities"], {"images": x})
        return {"predictions": [{"label": int(np.argmax(p)), "probabilities": rounded(p)} for p in probs]}


def rounded(x: np.ndarray) -> list:
    return np.round(x.astype(np.float64), 6).tolist()
