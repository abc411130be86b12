"""Coordinate encodings as plug-ins, selected by name from a registry (tiny-cuda-nn style).

Every encoding maps [N, in_dim] coordinates to [N, out_dim] features, exposes `out_dim`, composes with
nn.Sequential, and keeps its tensors as buffers or parameters so they are part of the exported ONNX graph.
Each is an `Encoding` (base.py) with a typed config; fitting, export and the CLI call its hooks and name none.
`fourier` holds the fixed-frequency encodings, `grid_plugin` the trainable multiresolution grid (instant-ngp).

Adding an encoding: a module with its config (a dataclass subclassing `EncodingConfig`), its nn.Module and its
`Encoding` subclass (`name`, `config`, `build`, and the hooks it needs, e.g. `add_arguments`/`from_args` for
fit-image's options), and one `register(...)` line below. tests/training/test_encoding_plugins.py registers one.
"""

from __future__ import annotations

from torch import nn

from . import fourier
from .base import ENCODINGS, INITS, Encoding, EncodingConfig, Fitted, OptionError, encoding_for, register, unregister
from .fourier import TWO_PI, FixedFrequency, FourierConfig, Identity, Projection, SinCos, SineFeatures
from .grid import GridConfig, MultiresGrid
from .grid_plugin import GridEncoding

register(FixedFrequency("none", Identity))
register(FixedFrequency("basic", fourier.basic))
register(FixedFrequency("positional", fourier.positional, fourier.check_positional))
register(FixedFrequency("gaussian", fourier.gaussian, fourier.check_gaussian))
register(FixedFrequency("sine", SineFeatures, fourier.check_sine))
register(FixedFrequency("projection", Projection, fourier.check_gaussian))
register(GridEncoding())

__all__ = [
    "ENCODINGS",
    "INITS",
    "Encoding",
    "EncodingConfig",
    "Fitted",
    "FourierConfig",
    "GridConfig",
    "Identity",
    "MultiresGrid",
    "OptionError",
    "Projection",
    "SinCos",
    "SineFeatures",
    "TWO_PI",
    "build_encoding",
    "encoding_for",
    "register",
    "unregister",
]


def build_encoding(cfg: EncodingConfig) -> nn.Module:
    """Build the encoding named by cfg.name; an unknown name lists the valid ones."""
    return encoding_for(cfg).build(cfg)
