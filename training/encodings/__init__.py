"""Coordinate encodings, selected by name from a small registry (tiny-cuda-nn style).

Every encoding maps [N, in_dim] coordinates to [N, out_dim] features, exposes `out_dim`, composes with
nn.Sequential, and keeps its tensors as buffers or parameters so they are part of the exported ONNX graph.
`fourier` holds the fixed-frequency encodings, `grid` the trainable multiresolution grid (instant-ngp).
"""
from __future__ import annotations

from torch import nn

from ..errors import unknown
from .config import EncodingConfig
from .fourier import TWO_PI, Identity, Projection, SinCos, SineFeatures, basic, gaussian, positional
from .grid import MultiresGrid

ENCODINGS = {
    "none": Identity,
    "basic": basic,
    "positional": positional,
    "gaussian": gaussian,
    "sine": SineFeatures,
    "projection": Projection,
    "grid": MultiresGrid,
}

__all__ = ["ENCODINGS", "EncodingConfig", "Identity", "MultiresGrid", "Projection", "SinCos", "SineFeatures",
           "TWO_PI", "build_encoding"]


def build_encoding(cfg: EncodingConfig) -> nn.Module:
    """Build the encoding named by cfg.name; an unknown name lists the valid ones."""
    try:
        factory = ENCODINGS[cfg.name]
    except KeyError:
        raise unknown("encoding", cfg.name, ENCODINGS) from None
    return factory(cfg)
