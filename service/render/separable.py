"""Separable renders: the first stage's sines per tile row and column, the body graph per pixel.

An image model whose metadata.json has a `separable` entry (written by training/separable.py)
ships, beside `N/model.onnx`, a body graph `N/body.onnx` (features → rgb) and its first stage:
feature k is sin(P[k]·x + φ[k]). A render samples x = M·(x_n, y_m, 1) on a grid of columns x_n
and rows y_m (viewport, supersampling and the transform all keep it affine), so

    P[k]·x + φ[k] = x_n·a_k + (y_m·b_k + g_k),   a = P·M₀, b = P·M₁, g = P·M₂ + φ
    sin(u + v) = sin u · cos v + cos u · sin v

The tables sin/cos(u) per column and sin/cos(v) per row are computed in float64 — correct to an ulp
at any argument, so no float32 range-reduction error grows with |x|·|P| — and only the combine,
two multiplies and an add per feature and sample, runs in float32 (error ≤ ~2.5e-7).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from modelrepo import ContractError, SeparableStage, sha256_file

from ..errors import ModelLoadError
from .tiling import Tile, grid_axes


@dataclass(frozen=True)
class FirstStage:
    P: np.ndarray       # [F, 2] float64
    phase: np.ndarray   # [F] float64

    @classmethod
    def from_metadata(cls, entry: dict) -> "FirstStage":
        """The stage of a metadata `separable` entry, checked by the contract (modelrepo.SeparableStage)."""
        try:
            P, phase = SeparableStage.first_stage(entry)
        except ContractError as e:
            raise ModelLoadError(str(e)) from None
        return cls(np.array(P, np.float64), np.array(phase, np.float64))

    @property
    def features(self) -> int:
        return self.P.shape[0]


def _pairs(stage: FirstStage) -> bool:
    """Features in (cos q, sin q) pairs: equal P, phases π/2 apart (the exporter's Gaussian,
    positional and basic features). float32's π/2 is 4.4e-8 off; that much is tolerated."""
    P, ph = stage.P, stage.phase
    return (P.shape[0] % 2 == 0 and np.array_equal(P[0::2], P[1::2])
            and bool(np.all(np.abs(ph[0::2] - ph[1::2] - np.pi / 2) <= 1e-6)))


def _cis(angles: np.ndarray) -> np.ndarray:
    """e^{i·angles} as complex64, from float64 sines and cosines."""
    z = np.empty(angles.shape, np.complex64)
    z.real, z.imag = np.cos(angles), np.sin(angles)
    return z


class GridFeatures:
    """The first stage's features on one render's sample grid, tile by tile.

    sin(u + v) is Im(e^{iu}·e^{iv}): one complex64 multiply per feature and sample, a single
    vectorised numpy pass (the real form's two products and a sum cost 3-5× more in temporaries).
    Paired features (cos q, sin q) are the real and imaginary parts of one product: its float32 view
    is the body's input, with no copy.
    """

    def __init__(self, stage: FirstStage, matrix: np.ndarray):
        m = np.asarray(matrix, np.float64)
        self.paired = _pairs(stage)
        P, phase = (stage.P[1::2], stage.phase[1::2]) if self.paired else (stage.P, stage.phase)
        self.a = P @ m[:, 0]                  # per unit of x
        self.b = P @ m[:, 1]                  # per unit of y
        self.g = P @ m[:, 2] + phase
        self._rows: tuple | None = None       # the last tile row's table (row-major tiles share it)

    def _row_table(self, ys: np.ndarray, key: tuple) -> np.ndarray:
        rows = self._rows  # one read: another thread may swap in another tile row's table
        if rows is None or rows[0] != key:
            rows = self._rows = (key, _cis(ys[:, None] * self.b + self.g))
        return rows[1]

    def tile(self, xs: np.ndarray, ys: np.ndarray, key: tuple) -> np.ndarray:
        """[len(ys)·len(xs), F] float32 features, row-major like the tile's samples."""
        zc = _cis(xs[:, None] * self.a)       # [c, F'] per column
        zr = self._row_table(ys, key)         # [r, F'] per row
        z = np.multiply(zr[:, None, :], zc[None, :, :]).reshape(len(ys) * len(xs), -1)
        return z.view(np.float32) if self.paired else np.ascontiguousarray(z.imag)


@dataclass(frozen=True)
class SeparableBody:
    """A loaded body graph and its first stage."""
    stage: FirstStage
    session: object          # onnxruntime.InferenceSession, features → rgb
    input: str
    sha256: str
    stage_sha256: str

    def run(self, features: np.ndarray) -> np.ndarray:
        return self.session.run(["rgb"], {self.input: features})[0]


def load_separable(entry, version_dir: Path, make_session: Callable[[Path], object]) -> SeparableBody | None:
    """The `separable` entry of metadata.json, checked and loaded; None when the model has none."""
    if entry is None:
        return None
    try:
        contract = SeparableStage.from_metadata(entry)
    except ContractError as e:
        raise ModelLoadError(str(e)) from None
    stage = FirstStage(np.array(contract.P, np.float64), np.array(contract.phase, np.float64))
    name = contract.body
    path = version_dir / name
    if not path.is_file():
        raise ModelLoadError(f"missing {version_dir.name}/{name} (metadata.json separable)")
    digest = sha256_file(path)
    if digest != contract.body_sha256:
        raise ModelLoadError(f"sha256 of {version_dir.name}/{name} ({digest[:12]}…) does not match metadata.json "
                             f"separable.body_sha256: tampered or stale")
    session = make_session(path)
    inputs, outputs = session.get_inputs(), {o.name for o in session.get_outputs()}
    want = contract.input
    if (len(inputs) != 1 or inputs[0].name != want or inputs[0].type != "tensor(float)"
            or inputs[0].shape[-1] != stage.features or "rgb" not in outputs):
        raise ModelLoadError(f"{version_dir.name}/{name}: expected one float input '{want}' of shape "
                             f"[N, {stage.features}] and an output 'rgb'")
    return SeparableBody(stage, session, want, digest, contract.stage_sha256)


def separable_sampler(body: SeparableBody, spec, run: Callable[[np.ndarray], np.ndarray] | None = None
                      ) -> Callable[[Tile], np.ndarray]:
    """Samples of a tile of `spec` (imaging.RenderSpec) through the first stage's tables and the body;
    `run` (default `body.run`) runs the body graph — the service passes ModelRuntime.predict_features."""
    grid = GridFeatures(body.stage, spec.matrix)
    run = run or body.run

    def sample(t: Tile) -> np.ndarray:
        xs, ys = grid_axes(t, spec.width, spec.height, spec.supersample, spec.viewport)
        return run(grid.tile(xs, ys, (t.y0, t.y1)))
    return sample
