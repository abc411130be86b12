"""The separable form of an image model, for renders without per-pixel sines.

A render samples the model on an affine grid x = A·(j, i) + c. When the network's first stage
is a bank of sines f_k(x) = sin(p_k·x + φ_k), every argument is α_k j + β_k i + γ_k, and
sin(α j + β i + γ) = sin(α j)·cos(β i + γ) + cos(α j)·sin(β i + γ): the service computes the sines
once per column and once per row and runs only the *body* (features → rgb) per pixel.

This module splits a fitted `ImageINR` into that first stage — P [F, 2] and φ [F] — and the body
module, exports the body graph beside `model.onnx` and checks its parity. It covers
  - Gaussian, positional and basic features (sin and cos = sin with a π/2 phase),
  - StyleGAN3 `sine` features (their amplitudes stay in the body),
  - a SineKAN first layer on raw coordinates or on `projection`s (its sin(ω_g p_j + φ_jg) terms);
SineKAN on sine features is separable up to its encoding, which then is the first stage.
An MLP on raw coordinates has no sines: it has no separable form (returns None).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from modelrepo import SeparableStage

from .encodings import TWO_PI, Identity, Projection, SinCos, SineFeatures
from .export import check_parity, export_onnx, ort_session
from .image_models import ImageINR
from .repository import sha256_bytes
from .sinekan import SineKANLayer

log = logging.getLogger(__name__)
BODY_FILE = "body.onnx"
BODY_INPUT = "features"
# The body graph is checked against torch like model.onnx; the whole separable pipeline
# (float64 first stage + body graph) against model.onnx within what float32 arguments allow.
BODY_ATOL = 1e-5


@dataclass
class FirstStage:
    P: np.ndarray  # [F, 2] float64: feature k is sin(P[k]·x + phase[k])
    phase: np.ndarray  # [F] float64

    def features(self, coords: np.ndarray) -> np.ndarray:
        """sin(x Pᵀ + φ) of [N, 2] coordinates, in float64."""
        return np.sin(np.asarray(coords, np.float64) @ self.P.T + self.phase)


class SeparableBody(nn.Module):
    """features [N, F] → rgb [N, 3]: everything of the model after its first stage's sines."""

    def __init__(self, pre: nn.Module | None, rest: nn.Module, amps: torch.Tensor | None = None):
        super().__init__()
        self.pre, self.rest = pre, rest
        if amps is not None:
            self.register_buffer("amps", amps.clone())
        else:
            self.amps = None

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        if self.amps is not None:
            f = self.amps * f
        if self.pre is not None:
            f = self.pre(f)
        return torch.sigmoid(self.rest(f))


class SineKANAfterSines(nn.Module):
    """A SineKAN layer from its flattened sines [N, G·in] on: the amplitude GEMM plus bias."""

    def __init__(self, layer: SineKANLayer):
        super().__init__()
        self.layer = layer

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        a = self.layer.amplitudes.permute(0, 2, 1).reshape(self.layer.out_dim, -1)  # [out, G·in]
        return s @ a.t() + self.layer.bias


@torch.no_grad()
def permute_inputs(body: nn.Module, perm: torch.Tensor) -> nn.Module:
    """A copy of `body` that takes its input features in the order f[:, perm] (exactly)."""
    body = copy.deepcopy(body)
    first = body[0]
    if isinstance(first, nn.Linear):
        first.weight.copy_(first.weight[:, perm])
    elif isinstance(first, SineKANLayer):
        first.amplitudes.copy_(first.amplitudes[:, perm, :])
        first.phase.copy_(first.phase[perm, :])
    else:
        raise TypeError(f"cannot reorder the inputs of {type(first).__name__}")
    return body


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


@torch.no_grad()
def split(model: ImageINR) -> tuple[FirstStage, SeparableBody] | None:
    """The first stage and body of `model`, or None when it has no sines to separate.

    P and φ are the network's exact parameters in float64 (from its float32 buffers).
    """
    enc, body = model.encoding, model.body
    if isinstance(enc, SinCos):
        # features reordered to (cos q_i, sin q_i) pairs: the service then computes each pair as one
        # complex product e^{iu}·e^{iv}, whose float32 view is the pair (no de-interleaving pass)
        # P = 2π[B, B] and phases [0, π/2] exactly, in float64: the plain graph's float32 constant
        # 2π·B is itself rounded (by up to 4e-6 at |2πB| = 70), which the render need not repeat
        m = enc.m
        B = _f64(enc.B)
        W = TWO_PI * np.concatenate([B, B], axis=1)
        phase = np.concatenate([np.zeros(m), np.full(m, np.pi / 2)])
        perm = torch.stack([torch.arange(m) + m, torch.arange(m)], dim=1).reshape(-1)
        return (
            FirstStage(W.T[perm.numpy()].copy(), phase[perm.numpy()]),
            SeparableBody(None, permute_inputs(body, perm)),
        )
    if isinstance(enc, SineFeatures):
        # the plain graph computes 2π·(v f + φ): P = 2π f, phase = 2π φ
        return (
            FirstStage(TWO_PI * _f64(enc.freqs).T, TWO_PI * _f64(enc.phases)),
            SeparableBody(None, body, amps=enc.amps),
        )
    first = body[0] if isinstance(body, nn.Sequential) and len(body) else None
    if isinstance(first, SineKANLayer) and isinstance(enc, (Identity, Projection)):
        # sin(ω_g p_j + φ_jg) on p = x M (M = I on raw coordinates, B for projections), grid-major [G, in]
        g, d = first.grid_size, first.in_dim
        M = np.eye(d) if isinstance(enc, Identity) else _f64(enc.B)  # [2, in]
        omega, ph = _f64(first.frequencies), _f64(first.phase)  # [G], [in, G]
        P = np.concatenate([np.float64(np.float32(omega[k])) * M.T for k in range(g)])  # [G·in, 2]
        phase = ph.T.reshape(-1)
        return FirstStage(P, phase), SeparableBody(SineKANAfterSines(first), nn.Sequential(*list(body)[1:]))
    return None


def export_separable(model: ImageINR, probe: np.ndarray) -> tuple[bytes, dict] | None:
    """(body.onnx bytes, the metadata entry `separable`), both parity-checked; None if not separable.

    Gates: the body graph against the torch body on the first stage's features (≤ BODY_ATOL), and
    the whole separable pipeline against the torch model at `probe` coordinates; the latter is
    recorded (float32 argument rounding in the plain model dominates it) and bounded by 1e-4.
    """
    parts = split(model.eval().cpu())
    if parts is None:
        return None
    stage, body = parts
    body = body.eval()
    feats = stage.features(probe).astype(np.float32)
    onnx_bytes = export_onnx(body, torch.from_numpy(feats[:8]), BODY_INPUT, ["rgb"])
    body_parity = check_parity(body, onnx_bytes, feats, BODY_INPUT, ["rgb"], atol=BODY_ATOL)
    with torch.no_grad():
        ref = model(torch.from_numpy(probe.astype(np.float32))).numpy()
    got = ort_session(onnx_bytes).run(["rgb"], {BODY_INPUT: feats})[0]
    pipeline = float(np.max(np.abs(ref - got)))
    if not pipeline <= 1e-4:
        from .export import ExportParityError

        raise ExportParityError(f"separable render differs from the model by {pipeline:.3g} > 1e-4")
    log.info("separable export: body parity %s, pipeline %.3g", body_parity, pipeline)
    contract = SeparableStage(
        tuple(map(tuple, stage.P.tolist())),
        tuple(stage.phase.tolist()),
        BODY_FILE,
        sha256_bytes(onnx_bytes),
        BODY_INPUT,
    )
    return onnx_bytes, contract.to_metadata(parity={"body_vs_torch": body_parity["rgb"], "pipeline_vs_torch": pipeline})


def write_separable(model: ImageINR, probe: np.ndarray, meta: dict):
    """Export the separable body (if the model has one) into `meta["separable"]`; return the
    function that writes `body.onnx` into the version folder being written (beside model.onnx)."""
    sep = export_separable(model, probe)
    if sep is None:
        return lambda d: None
    body_bytes, meta["separable"] = sep
    return lambda d: (d / BODY_FILE).write_bytes(body_bytes)
