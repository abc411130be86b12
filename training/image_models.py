"""Coordinate → RGB networks, built from a config dataclass (nanoGPT style).

Small parts first (layers), then the whole (`ImageINR` = encoding + body + sigmoid).
`ImageModelConfig` is passed whole and saved in checkpoints as `model_args`, so
export can rebuild the exact module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import torch
from torch import nn

from .encodings import EncodingConfig, build_encoding, encoding_for
from .errors import UsageError, unknown
from .sinekan import INITS, SineKAN


@dataclass
class ImageModelConfig:
    model: str = "mlp"  # mlp | mlp-bn | sinekan
    depth: int = 4  # number of linear (or SineKAN) layers, output included
    width: int = 256
    grid_size: int = 8  # sinekan only
    first_grid: int = 0  # sinekan: the first layer's grid size (0 = grid_size)
    first_freq: float = 0.0  # sinekan: the first layer's top frequency in cycles per unit (0 = paper)
    sinekan_init: str = "scaled"  # sinekan: amplitude init, scaled (unit output variance) | paper
    hidden_freq: float = 1.0  # sinekan: scale of the later layers' grids, ω_k = hidden_freq·k/(G+1) (1 = paper)
    out_dim: int = 3
    encoding: EncodingConfig = field(default_factory=EncodingConfig)

    def to_dict(self) -> dict:
        """The saved form (checkpoint `model_args`, metadata.json `architecture`): the encoding in its flat form."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "encoding": self.encoding.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "ImageModelConfig":
        """Read the saved form, of today or of older versions (encodings/base.py, `from_flat`)."""
        d = dict(d)
        d["encoding"] = EncodingConfig.from_dict(d.get("encoding", {}))
        return cls(**d)


def mlp_body(in_dim: int, cfg: ImageModelConfig) -> nn.Sequential:
    """The Fourier-features paper's plain ReLU MLP: (depth−1) × [Linear, ReLU], Linear."""
    dims = [in_dim] + [cfg.width] * (cfg.depth - 1)
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(dims[-1], cfg.out_dim))
    return nn.Sequential(*layers)


def mlp_bn_body(in_dim: int, cfg: ImageModelConfig) -> nn.Sequential:
    """The seed blog's variant: (depth−1) × [Linear, ReLU, BatchNorm1d], Linear."""
    dims = [in_dim] + [cfg.width] * (cfg.depth - 1)
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU(), nn.BatchNorm1d(b)]
    layers.append(nn.Linear(dims[-1], cfg.out_dim))
    return nn.Sequential(*layers)


def sinekan_first_scale(cfg: ImageModelConfig) -> float:
    """The first layer's ω_k = scale·k, k = 1..G₁, topping at 2π·first_freq rad (0: the paper's, scale 1)."""
    g1 = cfg.first_grid or cfg.grid_size
    return 2 * math.pi * cfg.first_freq / g1 if cfg.first_freq else 1.0


def sinekan_body(in_dim: int, cfg: ImageModelConfig) -> nn.Sequential:
    """SineKAN layers [in, width × (depth−1), out] on raw or encoded coordinates."""
    return SineKAN(
        [in_dim] + [cfg.width] * (cfg.depth - 1) + [cfg.out_dim],
        grid_size=cfg.grid_size,
        first_grid=cfg.first_grid or None,
        first_scale=sinekan_first_scale(cfg),
        init=cfg.sinekan_init,
        later_scale=cfg.hidden_freq,
    )


BODIES = {"mlp": mlp_body, "mlp-bn": mlp_bn_body, "sinekan": sinekan_body}
# What `fit-image --model NAME` gives for the options left at their defaults (fit-image's own defaults
# are the MLP's). SineKAN's: the best variant of docs/benchmarks.md, fourier_table, chosen on validation photos
# (coffee, rocket, cat; not the table's): a 4×130 SineKAN, grid 4, on 128 Gaussian projections whose
# sines its first layer (grid 8, harmonics k/8 of each projection) takes, later grids ×3; 270k
# parameters against the 4×256 MLP's 264k; σ 0.6× the MLP's (3 against 5 at 128² on those photos);
# with fit-image's fast schedule (cosine, 4096-pixel batches) at lr 1e-3, which beat 2e-3 and 5e-3 there.
MODEL_DEFAULTS: dict[str, dict] = {
    "sinekan": {
        "encoding": "projection",
        "features": 128,
        "width": 130,
        "grid": 4,
        "first_grid": 8,
        "first_freq": 1.0,
        "hidden_freq": 3.0,
        "scale": 6.0,
        "lr": 1e-3,
    },
}


class ImageINR(nn.Module):
    """coords [N, 2] in [0,1]² → rgb [N, 3] in [0,1]."""

    def __init__(self, cfg: ImageModelConfig):
        super().__init__()
        if cfg.model not in BODIES:
            raise unknown("model", cfg.model, BODIES)
        if cfg.depth < 1 or cfg.width < 1:
            raise UsageError(f"--depth and --width must be >= 1, got {cfg.depth} and {cfg.width}")
        if cfg.first_grid < 0 or not (cfg.first_freq >= 0 and math.isfinite(cfg.first_freq)):
            raise UsageError(f"--first-grid and --first-freq must be >= 0, got {cfg.first_grid} and {cfg.first_freq}")
        if not (cfg.hidden_freq > 0 and math.isfinite(cfg.hidden_freq)):
            raise UsageError(f"--hidden-freq must be a positive finite number, got {cfg.hidden_freq}")
        if cfg.sinekan_init not in INITS:
            raise unknown("sinekan init", cfg.sinekan_init, INITS)
        self.config = cfg
        self.encoding = build_encoding(cfg.encoding)
        self.body = BODIES[cfg.model](self.encoding.out_dim, cfg)

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.body(self.encoding(coords)))

    def export_plan(self, input_name: str):
        """The encoding's own ONNX layout for this model (training/export.py asks), or None: trace it whole."""
        return encoding_for(self.config.encoding).export_plan(self.config.encoding, self, input_name)


@torch.no_grad()
def fold_batchnorm(model: ImageINR) -> ImageINR:
    """Fold each eval-mode BatchNorm1d into the next Linear layer, in place.

    BN(h) = s·h + t with s = γ/√(var+ε), t = β − s·mean; the next Linear W·BN(h)+b
    becomes (W·diag(s))·h + (W·t + b). The output is unchanged up to rounding.
    """
    layers = list(model.body)
    out: list[nn.Module] = []
    i = 0
    while i < len(layers):
        layer = layers[i]
        if isinstance(layer, nn.BatchNorm1d):
            nxt = layers[i + 1]
            assert isinstance(nxt, nn.Linear), "BatchNorm must be followed by Linear to fold"
            s = layer.weight / torch.sqrt(layer.running_var + layer.eps)
            t = layer.bias - s * layer.running_mean
            fused = nn.Linear(nxt.in_features, nxt.out_features)
            fused.weight.copy_(nxt.weight * s[None, :])
            fused.bias.copy_(nxt.bias + nxt.weight @ t)
            out.append(fused)
            i += 2
            continue
        out.append(layer)
        i += 1
    model.body = nn.Sequential(*out)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
