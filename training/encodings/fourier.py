"""Fixed-frequency encodings: raw coordinates, sines and cosines (basic, positional, Gaussian Fourier
features), StyleGAN3-style sine features and the bare projections a SineKAN takes the sines of.

They share one config (`FourierConfig`) and its command-line options; each is a `FixedFrequency` plug-in of its
name, its module's constructor and its option checks (registered in training/encodings/__init__.py)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from commandline import positive_float, positive_int

from ..errors import UsageError
from .base import Encoding, EncodingConfig, OptionError

TWO_PI = 2.0 * math.pi


@dataclass
class FourierConfig(EncodingConfig):
    scale: float = 10.0  # gaussian / projection: σ of B ~ N(0, σ²)
    features: int = 256  # gaussian / sine / projection: number of frequencies m
    levels: int = 8  # positional: number of log-linear frequencies
    max_freq: float = 256.0  # positional: largest frequency (cycles per unit)
    bandwidth: float = 64.0  # sine: radius of the frequency disc (cycles per unit)
    damping: bool = False  # sine: damp amplitudes toward Nyquist
    nyquist: float = 0.0  # sine: Nyquist frequency of the training grid (size/2)


def positive_finite(value: float) -> bool:
    return value > 0 and math.isfinite(value)


def check_positional(cfg: FourierConfig) -> None:
    for option in ("levels", "max_freq"):
        if getattr(cfg, option) < 1:
            raise OptionError(cfg.name, option, f"must be >= 1, got {getattr(cfg, option):g}")


def check_gaussian(cfg: FourierConfig) -> None:
    """gaussian and projection: a positive finite σ, at least one frequency."""
    if not positive_finite(cfg.scale):
        raise OptionError(cfg.name, "scale", f"must be a positive finite number, got {cfg.scale}")
    if cfg.features < 1:
        raise OptionError(cfg.name, "features", f"must be >= 1, got {cfg.features}")


def check_sine(cfg: FourierConfig) -> None:
    if cfg.in_dim != 2:
        raise UsageError("sine features are defined for 2D coordinates")
    if not positive_finite(cfg.bandwidth):
        raise OptionError(cfg.name, "bandwidth", f"must be a positive finite number, got {cfg.bandwidth}")


class Identity(nn.Module):
    """`none`: raw coordinates."""

    def __init__(self, cfg: FourierConfig):
        super().__init__()
        self.out_dim = cfg.in_dim

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v


class SinCos(nn.Module):
    """γ(v) = [sin(2π vB), cos(2π vB)] = sin(2π v[B, B] + [0, π/2]) for a fixed frequency matrix B
    of shape (in_dim, m).

    The basis B is a buffer: it exports, and it never trains.
    """

    def __init__(self, B: torch.Tensor):
        super().__init__()
        self.register_buffer("B", B.float())
        self.out_dim = 2 * B.shape[1]

        m = B.shape[1]
        # cos p = sin(p + π/2): one Sin over [B, B] with phases [0, π/2], so the exported graph has
        # no Concat (an 8 MB copy per 8192-coordinate tile, docs/benchmarks.md, roofline).
        self.m = m

    def first_stage(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """(W [in_dim, 2m], phase [2m]) with γ(v) = sin(v W + phase). Built on each call, so that a
        loaded B (and .double()) is used exactly; export folds both into constants."""
        phase = torch.cat([torch.zeros(self.m, dtype=dtype), torch.full((self.m,), math.pi / 2, dtype=dtype)])
        return TWO_PI * torch.cat([self.B, self.B], dim=1), phase

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        W, phase = self.first_stage(v.dtype)
        return torch.sin(v @ W + phase)  # [N, 2m]


def basic(cfg: FourierConfig) -> SinCos:
    """`basic`: γ(v) = [sin 2πv, cos 2πv], B = I."""
    return SinCos(torch.eye(cfg.in_dim))


def positional(cfg: FourierConfig) -> SinCos:
    """`positional`: axis-aligned log-linear frequencies σ^(j/L), j = 0..L-1, σ = max_freq
    (Tancik et al. 2020, eq. for positional encoding; NeRF uses powers of two)."""
    check_positional(cfg)
    freqs = cfg.max_freq ** (torch.arange(cfg.levels, dtype=torch.float64) / max(cfg.levels - 1, 1))
    eye = torch.eye(cfg.in_dim, dtype=torch.float64)
    B = torch.cat([eye * f for f in freqs], dim=1)  # [in_dim, in_dim * L]
    return SinCos(B)


def gaussian(cfg: FourierConfig) -> SinCos:
    """`gaussian`: random Fourier features, B ~ N(0, σ²) of shape (in_dim, m)."""
    check_gaussian(cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    return SinCos(torch.randn(cfg.in_dim, cfg.features, generator=g) * cfg.scale)


class SineFeatures(nn.Module):
    """`sine`: StyleGAN3-style Fourier features, sin only.

    Frequencies f are drawn uniformly on a 2D disc of radius `bandwidth`, phases
    φ ~ U(-1/2, 1/2); the feature is a·sin(2π(v·f + φ)). With damping, the
    amplitude a = clamp(1 - (|f| - c)/(n - c), 0, 1) with cutoff c = n/2 fades
    frequencies toward the Nyquist frequency n of the training grid (StyleGAN3 §3.2
    fades filters the same way).
    """

    def __init__(self, cfg: FourierConfig):
        super().__init__()
        check_sine(cfg)
        g = torch.Generator().manual_seed(cfg.seed)
        m = cfg.features
        # Uniform on the disc: radius = R·sqrt(u) gives uniform area density.
        radius = cfg.bandwidth * torch.rand(m, generator=g).sqrt()
        theta = TWO_PI * torch.rand(m, generator=g)
        freqs = torch.stack([radius * torch.cos(theta), radius * torch.sin(theta)], dim=0)  # [2, m]
        phases = torch.rand(m, generator=g) - 0.5
        amps = torch.ones(m)
        if cfg.damping and cfg.nyquist > 0:
            cutoff = cfg.nyquist / 2
            amps = (1 - (radius - cutoff) / (cfg.nyquist - cutoff)).clamp(0, 1)
        self.register_buffer("freqs", freqs)
        self.register_buffer("phases", phases)
        self.register_buffer("amps", amps)
        self.out_dim = m

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return self.amps * torch.sin(TWO_PI * (v @ self.freqs + self.phases))  # [N, m]


class Projection(nn.Module):
    """`projection`: random Gaussian projections p = v B, B ~ N(0, σ²) of shape (in_dim, m), in cycles
    per unit, with no sines: the input of a SineKAN whose first layer takes the sines.

    sin(ω_k p_j + φ_jk) = sin(ω_k b_j·v + φ_jk) is then a Gaussian Fourier feature at the frequency
    (ω_k / 2π)·b_j: each projection gets the first layer's G₁ harmonics, and because the ω_k train, the
    network tunes the bandwidth that σ fixes for an MLP. Under an MLP it is only a linear layer.
    """

    def __init__(self, cfg: FourierConfig):
        super().__init__()
        self.register_buffer("B", gaussian(cfg).B)
        self.out_dim = self.B.shape[1]

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v @ self.B  # [N, m]


class FixedFrequency(Encoding):
    """The plug-in of one fixed-frequency encoding: its name, its module's constructor and its option checks."""

    config = FourierConfig

    def __init__(
        self,
        name: str,
        build: Callable[[FourierConfig], nn.Module],
        check: Callable[[FourierConfig], None] | None = None,
    ):
        self.name, self._build, self._check = name, build, check

    def build(self, cfg: FourierConfig) -> nn.Module:
        return self._build(cfg)

    def validate(self, cfg: FourierConfig) -> None:
        if self._check is not None:
            self._check(cfg)

    def add_arguments(self, p: argparse.ArgumentParser, default_help) -> None:
        p.add_argument(
            "--scale",
            type=positive_float,
            help="gaussian/projection: σ of the frequency matrix" + default_help("scale", " "),
        )
        p.add_argument(
            "--features",
            type=positive_int,
            help="gaussian/sine/projection: number of frequencies" + default_help("features", " "),
        )
        p.add_argument("--levels", type=positive_int, default=8, help="positional: number of frequencies")
        p.add_argument(
            "--max-freq", type=positive_float, default=None, help="positional: largest frequency (default: SIZE/4)"
        )
        p.add_argument(
            "--bandwidth",
            type=positive_float,
            default=None,
            help="sine: radius of the frequency disc (default: SIZE/8)",
        )
        p.add_argument("--damping", action="store_true", help="sine: damp amplitudes toward Nyquist")

    def from_args(self, args: argparse.Namespace, image_size: tuple[int, int]) -> FourierConfig:
        """Frequencies derive from the image's longer side (SIZE), the Nyquist frequency from the pixels trained on."""
        w, h = image_size
        side = max(w, h)
        return FourierConfig(
            name=self.name,
            scale=args.scale,
            features=args.features,
            levels=args.levels,
            max_freq=args.max_freq or max(side / 4, 1.0),
            bandwidth=args.bandwidth or max(side / 8, 1.0),
            damping=args.damping,
            nyquist=side / 4 if args.protocol == "paper" else side / 2,
            seed=args.seed,
            image_size=[w, h],
        )
