"""Networks this project did not write, built from their papers' definitions and exported by torch.onnx.export with
their own tensor names (issue 56), and model folders of them with config.pbtxt alone:

- SIREN (Sitzmann et al. 2020, "Implicit Neural Representations with Periodic Activation Functions"): layers
  sin(30·(Wx + b)), the first initialised U(-1/in, 1/in), the others U(-√(6/in)/30, √(6/in)/30), a linear last layer;
  coordinates in [-1, 1] from the paper's `get_mgrid` (linspace(-1, 1, side), meshgrid 'ij': y first, the grid's
  ends the first and last pixels), values in [-1, 1]; its code's tensor names `model_input` / `model_output`.
- A Fourier-feature MLP (Tancik et al. 2020, "Fourier Features Let Networks Learn High Frequency Functions"):
  γ(x) = [cos(2πBx), sin(2πBx)], B ~ N(0, σ²), then a ReLU MLP and a sigmoid; coordinates in [0, 1]; a grey image.
- A generic classifier: a small ReLU MLP over 8 features, softmax over 4 classes.
Tiny, seeded, untrained (the weights' values do not matter to serving them)."""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn


class Sine(nn.Module):
    def __init__(self, n_in: int, n_out: int, first: bool, omega: float = 30.0):
        super().__init__()
        self.omega, self.linear = omega, nn.Linear(n_in, n_out)
        bound = 1 / n_in if first else math.sqrt(6 / n_in) / omega
        nn.init.uniform_(self.linear.weight, -bound, bound)

    def forward(self, x):
        return torch.sin(self.omega * self.linear(x))


class Siren(nn.Module):
    def __init__(self, hidden: int = 16, layers: int = 2, out: int = 3):
        super().__init__()
        mods = [Sine(2, hidden, True)] + [Sine(hidden, hidden, False) for _ in range(layers - 1)]
        last = nn.Linear(hidden, out)
        bound = math.sqrt(6 / hidden) / 30
        nn.init.uniform_(last.weight, -bound, bound)
        self.net = nn.Sequential(*mods, last)

    def forward(self, model_input):
        return self.net(model_input)


class FourierMLP(nn.Module):
    def __init__(self, features: int = 16, sigma: float = 4.0, hidden: int = 16, out: int = 1):
        super().__init__()
        self.register_buffer("B", torch.randn(features, 2) * sigma)
        self.mlp = nn.Sequential(nn.Linear(2 * features, hidden), nn.ReLU(), nn.Linear(hidden, out), nn.Sigmoid())

    def forward(self, x):
        proj = 2 * math.pi * x @ self.B.T
        return self.mlp(torch.cat([torch.cos(proj), torch.sin(proj)], -1))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, features):
        return torch.softmax(self.mlp(features), -1)


def export(module: nn.Module, example: torch.Tensor, input_name: str, output_name: str) -> bytes:
    """torch.onnx.export with the network's own tensor names, the batch dimension dynamic."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (example,),
            buf,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    return buf.getvalue()


def siren_onnx() -> bytes:
    torch.manual_seed(1)
    return export(Siren(), torch.zeros(4, 2), "model_input", "model_output")


def fourier_onnx() -> bytes:
    torch.manual_seed(2)
    return export(FourierMLP(), torch.zeros(4, 2), "x", "y")


def classifier_onnx() -> bytes:
    torch.manual_seed(3)
    return export(Classifier(), torch.zeros(4, 8), "features", "scores")


# config.pbtxt of each, as their owners would write it: the convention of an image network, nothing else
SIREN_CONFIG = """
parameters { key: "coordinate_range" value { string_value: "-1,1" } }
parameters { key: "coordinate_order" value { string_value: "yx" } }
parameters { key: "pixel_grid" value { string_value: "corners" } }
parameters { key: "output_range" value { string_value: "-1,1" } }
parameters { key: "image_width" value { string_value: "40" } }
parameters { key: "image_height" value { string_value: "24" } }
"""
FOURIER_CONFIG = """
max_batch_size: 65536
parameters { key: "task" value { string_value: "image" } }
"""
CLASSIFIER_CONFIG = 'platform: "onnxruntime_onnx"\nmax_batch_size: 16\n'


def write_model(repo: Path, name: str, onnx_bytes: bytes, config: str | None, version: int = 1) -> Path:
    """NAME/config.pbtxt (unless None) and NAME/VERSION/model.onnx: a plain Triton model folder."""
    (repo / name / str(version)).mkdir(parents=True, exist_ok=True)
    (repo / name / str(version) / "model.onnx").write_bytes(onnx_bytes)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    return repo / name


def siren_grid(width: int, height: int) -> np.ndarray:
    """The SIREN's own pixel grid (its get_mgrid on a width × height image, y first), row-major [H·W, 2]."""
    ys, xs = np.linspace(-1, 1, height), np.linspace(-1, 1, width)
    gy, gx = np.meshgrid(ys, xs, indexing="ij")
    return np.stack([gy.ravel(), gx.ravel()], -1).astype(np.float32)


def centre_grid(width: int, height: int) -> np.ndarray:
    """Pixel centres of the unit square, x first, row-major [H·W, 2]."""
    gx, gy = np.meshgrid((np.arange(width) + 0.5) / width, (np.arange(height) + 0.5) / height)
    return np.stack([gx.ravel(), gy.ravel()], -1).astype(np.float32)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def ort_values(onnx_bytes: bytes, x: np.ndarray) -> np.ndarray:
    """The network's first output on `x`, by onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]
