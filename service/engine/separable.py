"""A separable image model's body graph and first stage, loaded with its version (service/engine/runtime.py).

An image model whose metadata.json has a `separable` entry (written by training/separable.py) ships, beside
`N/model.onnx`, a body graph `N/body.onnx` (features → rgb) and its first stage: feature k is
sin(P[k]·x + φ[k]). Renders compute the first stage per tile row and column (service/render/separable.py)
and run only the body per pixel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from modelrepo import ContractError, SeparableStage, sha256_file

from ..errors import ModelLoadError


@dataclass(frozen=True)
class FirstStage:
    P: np.ndarray  # [F, 2] float64
    phase: np.ndarray  # [F] float64

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


@dataclass(frozen=True)
class SeparableBody:
    """A loaded body graph and its first stage."""

    stage: FirstStage
    session: object  # onnxruntime.InferenceSession, features → rgb
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
        raise ModelLoadError(
            f"sha256 of {version_dir.name}/{name} ({digest[:12]}…) does not match metadata.json "
            f"separable.body_sha256: tampered or stale"
        )
    session = make_session(path)
    inputs, outputs = session.get_inputs(), {o.name for o in session.get_outputs()}
    want = contract.input
    if (
        len(inputs) != 1
        or inputs[0].name != want
        or inputs[0].type != "tensor(float)"
        or inputs[0].shape[-1] != stage.features
        or "rgb" not in outputs
    ):
        raise ModelLoadError(
            f"{version_dir.name}/{name}: expected one float input '{want}' of shape "
            f"[N, {stage.features}] and an output 'rgb'"
        )
    return SeparableBody(stage, session, want, digest, contract.stage_sha256)
