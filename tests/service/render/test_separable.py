"""Separable renders equal the plain model: every first-stage kind, rotated, scaled, supersampled, σ up to 20.

The models are built by the training code (random weights: parity does not need a fit) and exported
with the separable body; the service side renders them from the metadata entry and body.onnx alone.
The reference is the same network in float64 (torch), which the plain float32 graph itself only
approximates: its arguments p·x + φ are rounded to float32 (half an ulp of |p·x|, 4e-6 at |p·x| = 64).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from modelrepo import read_spec
from service.api.schemas import RenderRequest, sampling_matrix
from service.engine.runtime import ModelRuntime, RuntimeOptions
from service.engine.separable import FirstStage
from service.engine.tasks import runtime_for
from service.errors import ModelLoadError
from service.geometry.sampling import Background
from service.geometry.transform import apply
from service.render.imaging import RenderSpec, plain_sampler
from service.render.separable import GridFeatures, separable_sampler
from service.render.tiling import Tile, grid_axes, sample_coords, tiles
from training.encodings import EncodingConfig
from training.fit_image import FitConfig, export_image_model
from training.image_models import ImageINR, ImageModelConfig

CASES = {
    "gaussian σ=20": ImageModelConfig(width=32, depth=3, encoding=EncodingConfig("gaussian", scale=20.0, features=48)),
    "gaussian σ=10": ImageModelConfig(width=32, depth=3, encoding=EncodingConfig("gaussian", scale=10.0, features=48)),
    "positional": ImageModelConfig(width=32, depth=3, encoding=EncodingConfig("positional", levels=6, max_freq=32)),
    "basic": ImageModelConfig(width=32, depth=3, encoding=EncodingConfig("basic")),
    "stylegan3 sine": ImageModelConfig(width=32, depth=3, encoding=EncodingConfig("sine", features=48, bandwidth=32)),
    "sinekan raw": ImageModelConfig(model="sinekan", width=16, depth=3, grid_size=6, encoding=EncodingConfig("none")),
    "sinekan on gaussian": ImageModelConfig(
        model="sinekan", width=16, depth=2, grid_size=4, encoding=EncodingConfig("gaussian", scale=10.0, features=16)
    ),
    "sinekan on projections": ImageModelConfig(
        model="sinekan",
        width=16,
        depth=3,
        grid_size=4,
        first_freq=1.0,
        encoding=EncodingConfig("projection", scale=8.0, features=12),
    ),
}
VIEWS = [  # (transform, supersample, viewport)
    ({}, 1, (0.0, 0.0, 1.0, 1.0)),
    ({"rotate": 33, "scale": 0.7}, 2, (0.0, 0.0, 1.0, 1.0)),
    ({"rotate": -120, "scale": 3.0, "translate": [0.2, 0.1]}, 1, (-0.5, -0.5, 1.5, 1.5)),
    ({"rotate": 90}, 3, (0.25, 0.25, 0.75, 0.75)),
]
SIZE = 96


def version_1(folder) -> ModelRuntime:
    return runtime_for(folder, read_spec(folder), 1, RuntimeOptions())


def export(tmp_path, name: str, cfg: ImageModelConfig) -> tuple[ModelRuntime, ImageINR]:
    torch.manual_seed(0)
    model = ImageINR(cfg).eval()
    preview = np.zeros((4, 4, 3), np.float32)
    export_image_model(model, FitConfig(model=cfg), tmp_path / name, {"kind": "test"}, {}, {}, preview)
    runtime = version_1(tmp_path / name)
    assert runtime.load(), runtime.error
    return runtime, model


def render_rgb(sample, spec: RenderSpec, tile_samples: int = 1024) -> np.ndarray:
    """Every sample's float rgb, [rows, cols, 3] of the whole sample grid."""
    k = spec.supersample
    out = np.zeros((spec.height * k, spec.width * k, 3))
    for t in tiles(spec.height, spec.width, k, tile_samples):
        out[t.y0 * k : t.y1 * k, t.x0 * k : t.x1 * k] = sample(t).reshape((t.y1 - t.y0) * k, (t.x1 - t.x0) * k, 3)
    return out


def spec_of(transform: dict, k: int, viewport) -> RenderSpec:
    req = RenderRequest.model_validate({"width": SIZE, "height": SIZE, "transform": transform})
    return RenderSpec(SIZE, SIZE, sampling_matrix(req.transform), viewport, k, Background("extrapolate"))


@pytest.mark.parametrize("case", list(CASES))
def test_separable_render_equals_the_model_in_float64(tmp_path, case):
    runtime, model = export(tmp_path, "m", CASES[case])
    assert runtime.separable is not None
    exact = model.double()
    for transform, k, viewport in VIEWS:
        spec = spec_of(transform, k, viewport)
        sep = render_rgb(separable_sampler(runtime.separable, spec), spec)
        plain = render_rgb(plain_sampler(lambda x: runtime.predict(x)["rgb"], spec), spec)
        coords = apply(spec.matrix, sample_coords(Tile(0, SIZE, 0, SIZE), SIZE, SIZE, k, viewport))
        with torch.no_grad():
            ref = exact(torch.from_numpy(coords.reshape(-1, 2))).numpy().reshape(sep.shape)
        sep_err, plain_err = np.abs(sep - ref).max(), np.abs(plain - ref).max()
        assert sep_err <= 1e-5, f"{case} {transform} k={k}: separable differs from float64 by {sep_err:.3g}"
        # the plain graph is the less exact one; the two agree to its float32 argument rounding
        assert np.abs(sep - plain).max() <= plain_err + 1e-5


def test_angle_addition_tables_stay_exact_far_from_the_origin():
    """At |p·x| ~ 1e4 float32 arguments are off by ~5e-4; the float64 tables are not."""
    rng = np.random.default_rng(1)
    stage = FirstStage(rng.normal(0, 20 * 2 * np.pi, (64, 2)), rng.uniform(-np.pi, np.pi, 64))
    matrix = np.array([[0.0, -3.0, 80.0], [3.0, 0.0, -40.0]])  # rotated, scaled and far off
    grid = GridFeatures(stage, matrix)
    tile = next(tiles(40, 50, 2, 1 << 20))
    xs, ys = grid_axes(tile, 50, 40, 2, (0.0, 0.0, 1.0, 1.0))
    got = grid.tile(xs, ys, (0, 40))
    x = apply(matrix, sample_coords(tile, 50, 40, 2)).reshape(-1, 2)
    assert np.abs(got - np.sin(x @ stage.P.T + stage.phase)).max() <= 1e-6


def test_a_tampered_body_graph_fails_the_model_and_none_renders_plain(tmp_path):
    runtime, _ = export(tmp_path, "m", CASES["basic"])
    body = tmp_path / "m" / "1" / "body.onnx"
    body.write_bytes(body.read_bytes()[:-1] + b"\0")
    broken = version_1(tmp_path / "m")
    assert not broken.load() and "body.onnx" in broken.error and "sha256" in broken.error
    meta = json.loads((tmp_path / "m" / "1" / "metadata.json").read_text())
    del meta["separable"]
    (tmp_path / "m" / "1" / "metadata.json").write_text(json.dumps(meta))
    plain = version_1(tmp_path / "m")
    assert plain.load() and plain.separable is None


def test_bad_first_stage_parameters_are_refused():
    with pytest.raises(ModelLoadError, match="P must be finite"):
        FirstStage.from_metadata({"P": [[1.0, 2.0, 3.0]], "phase": [0.0], "stage_sha256": "x"})
    with pytest.raises(ModelLoadError, match="stage_sha256"):
        FirstStage.from_metadata({"P": [[1.0, 2.0]], "phase": [0.0], "stage_sha256": "0" * 64})
