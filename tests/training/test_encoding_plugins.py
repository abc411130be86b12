"""Encodings are plug-ins (training/encodings/base.py): a new one is a config, a module and an `Encoding`, registered
in one line; fitting, export, the saved form and the command line then take it without a change anywhere else.
Here a tiny fixed projection is registered for the tests of this file only."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from training.encodings import ENCODINGS, Encoding, EncodingConfig, OptionError, register, unregister
from training.errors import UsageError
from training.fit_image import FitConfig, fit_image
from training.image_models import ImageINR, ImageModelConfig


@dataclass
class TinyConfig(EncodingConfig):
    FLAT_PREFIX: ClassVar[str] = "tiny_"  # saved as tiny_width, tiny_sigma: the names of its flags
    name: str = "tiny"
    width: int = 6  # projections
    sigma: float = 3.0  # their scale, cycles per unit


class TinyProjection(nn.Module):
    """sin(v W), W = 2π·N(0, σ²) of shape (in_dim, width): a buffer, so it is an initializer of the ONNX graph."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        g = torch.Generator().manual_seed(cfg.seed)
        self.register_buffer("W", 2 * math.pi * cfg.sigma * torch.randn(cfg.in_dim, cfg.width, generator=g))
        self.out_dim = cfg.width

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return torch.sin(v @ self.W)


class Tiny(Encoding):
    name = "tiny"
    config = TinyConfig
    calls: list[str] = []

    def validate(self, cfg: TinyConfig) -> None:
        if cfg.width < 1:
            raise OptionError(self.name, "width", f"must be >= 1, got {cfg.width}")

    def build(self, cfg: TinyConfig) -> nn.Module:
        self.validate(cfg)
        return TinyProjection(cfg)

    def initialise(self, cfg, model, image, protocol):
        self.calls.append("initialise")
        return None

    def finish(self, cfg, model, fitted):
        coords, _ = fitted.pixels()
        return {"tiny_finish": {"pixels": len(coords)}}

    def store(self, cfg, model, onnx_bytes):
        return onnx_bytes, {"tiny": "as traced"}

    def add_arguments(self, p: argparse.ArgumentParser, default_help) -> None:
        p.add_argument("--tiny-width", type=int, default=6, help="tiny: projections")
        p.add_argument("--tiny-sigma", type=float, default=3.0, help="tiny: their scale")

    def from_args(self, args: argparse.Namespace, image_size) -> TinyConfig:
        return TinyConfig(width=args.tiny_width, sigma=args.tiny_sigma, seed=args.seed, image_size=list(image_size))


@pytest.fixture
def tiny():
    plugin = register(Tiny())
    Tiny.calls.clear()
    yield plugin
    unregister("tiny")
    assert "tiny" not in ENCODINGS


def test_a_registered_encoding_fits_exports_and_onnx_matches_torch(tiny, tmp_path):
    from training.reexport import load_from_onnx

    cfg = FitConfig(
        image="camera",
        size=24,
        steps=8,
        batch_size=256,
        progress=False,
        device="cpu",
        protocol="full",
        model=ImageModelConfig(width=16, depth=2, encoding=TinyConfig(width=5, sigma=2.0, seed=3)),
    )
    cfg.validate()
    fit_image(cfg, tmp_path / "tiny")
    assert Tiny.calls == ["initialise"]
    meta = json.loads((tmp_path / "tiny" / "1" / "metadata.json").read_text())
    assert meta["encoding"] == {
        "name": "tiny",
        "in_dim": 2,
        "tiny_width": 5,
        "tiny_sigma": 2.0,
        "seed": 3,
        "image_size": [0, 0],
    }
    assert meta["training"]["tiny_finish"] == {"pixels": 24 * 24} and meta["export"]["tiny"] == "as traced"
    assert meta["export"]["opset"] == 17 and "separable" not in meta
    # the model rebuilt from its metadata (the saved form read back through the registry) and the ONNX weights
    model, _, _, _ = load_from_onnx(tmp_path / "tiny")
    assert isinstance(model.encoding, TinyProjection) and model.config.encoding == cfg.model.encoding
    xs = np.linspace(-0.25, 1.25, 41, dtype=np.float32)
    coords = np.stack(np.meshgrid(xs, xs), -1).reshape(-1, 2)
    session = ort.InferenceSession(str(tmp_path / "tiny" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["rgb"], {"coords": coords})[0]
    with torch.no_grad():
        want = model(torch.from_numpy(coords)).numpy()
    assert np.abs(got - want).max() <= 1e-5


def test_a_registered_encoding_brings_its_options_to_fit_image(tiny):
    from training.cli_image import add_image_options, cmd_fit_image, fit_config

    p = argparse.ArgumentParser()
    add_image_options(p)
    cfg = fit_config(p.parse_args(["--image", "camera", "--size", "20", "--encoding", "tiny", "--tiny-width", "3"]))
    assert cfg.model.encoding == TinyConfig(width=3, sigma=3.0, image_size=[20, 20])
    assert isinstance(ImageINR(cfg.model).encoding, TinyProjection)
    # the library names the option; fit-image says it as its flag
    with pytest.raises(OptionError, match="width of the tiny encoding must be >= 1, got 0"):
        tiny.build(TinyConfig(width=0))
    args = p.parse_args(
        ["--image", "camera", "--size", "20", "--encoding", "tiny", "--tiny-width", "0", "--steps", "1"]
    )
    args.out = None
    with pytest.raises(UsageError, match="^--tiny-width must be >= 1, got 0$"):
        cmd_fit_image(args)


def test_the_flat_form_reads_into_the_typed_config_of_the_encoding_named(tiny):
    old = {
        "name": "grid",
        "in_dim": 2,
        "scale": 10.0,
        "features": 256,
        "levels": 8,
        "max_freq": 480.0,
        "bandwidth": 240.0,
        "damping": False,
        "nyquist": 960.0,
        "seed": 0,
        "grid_levels": 6,
        "grid_features": 2,
        "grid_finest_features": 1,
        "grid_log2_table": 0,
        "grid_base": 16,
        "grid_finest": 0,
        "grid_bytes_per_pixel": 1.45,
        "grid_table_bits": 8,
        "image_size": [1920, 1080],
    }
    grid = EncodingConfig.from_dict(old)
    assert (type(grid).__name__, grid.levels, grid.finest_features, grid.table_bits) == ("GridConfig", 6, 1, 8)
    assert grid.to_dict() == {
        **{k: v for k, v in old.items() if k.startswith("grid_") or k in ("name", "in_dim", "seed", "image_size")},
        "grid_table_code": "rice",  # what every file before the context code (modelrepo/ctxcode.py) was coded by
        "grid_rd_lambda": 0.0,  # and rounded for its rate, not trained for it (grid_rd.py)
        "grid_rd_steps": 300,
    }
    assert EncodingConfig(name="tiny", tiny_width=2, features=64) == TinyConfig(width=2)  # features: not its own
    with pytest.raises(UsageError, match="unknown option.*tiny_widht"):
        EncodingConfig(name="tiny", tiny_widht=2)
