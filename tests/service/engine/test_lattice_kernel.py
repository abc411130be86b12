"""The lattice kernel (service/engine/_latticekernel.c): a dense grid's axis-aligned tile in one pass.

Models built and exported by the training code with random tables, as in test_lattice.py: the grid preset's storage
(8-bit tables, a native luma level, 15 → 32 → 3), float32 tables, a deeper head and more than 16 features (the
kernel's other road). On every view without supersamples the kernel's pixels, written tile by tile into the image,
are numpy's and onnxruntime's lattice pixels (within one level of rounding), and its rgb is the whole graph's within
the parity gate. A kernel that disagrees with its graph is left off at load, heads it cannot run keep the numpy
lattice, arrays it is handed wrongly are refused with an error, and it lets other threads run while it works.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import numpy as np
import pytest
import torch

from modelrepo import read_spec
from service.engine import lattice as lattice_module
from service.engine.lattice import PARITY, Kernel
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.geometry.sampling import Background
from service.render.core import painter_for
from service.render.imaging import RenderSpec, new_image, plain_sampler, render_tile
from service.render.lattice import KERNEL_TILE_FACTOR, LATTICE_TILE_FACTOR, lattice_painter, lattice_sampler
from service.render.tiling import tiles
from tests.service.engine.test_lattice import VIEWS, H, W, grid_folder, rgb
from training.encodings import EncodingConfig
from training.fit_image import FitConfig, export_image_model
from training.image_models import ImageINR, ImageModelConfig

MODELS = {  # (encoding options, fp16 weights, depth, width)
    "grid preset storage": ({"grid_table_bits": 8, "grid_finest_features": 1}, True, 2, 32),
    "float32 tables": ({"grid_table_bits": 16}, False, 2, 32),
    "two hidden layers": ({"grid_table_bits": 8}, False, 3, 24),
    "20 features": ({"grid_table_bits": 8, "grid_levels": 5, "grid_features": 4}, False, 2, 16),
}
FLAT = [view for view, (*_, k) in VIEWS.items() if k == 1]


NOT_BUILT = (
    "the lattice kernel is not built in this install: `pip install -e .` (make setup) builds it where a C compiler "
    "and Python's headers are (setup.py); CI requires it (INR_REQUIRE_LATTICE_KERNEL=1)"
)
pytestmark = pytest.mark.skipif(
    lattice_module._latticekernel is None and os.environ.get("INR_REQUIRE_LATTICE_KERNEL") != "1", reason=NOT_BUILT
)


def test_the_kernel_is_built():
    assert lattice_module._latticekernel is not None, NOT_BUILT


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kernel")
    return {
        label: grid_folder(tmp, f"k{i}", enc, fp16, depth, width)
        for i, (label, (enc, fp16, depth, width)) in enumerate(MODELS.items())
    }


def numpy_pixels(runtime, spec: RenderSpec) -> np.ndarray:
    """The image numpy's and onnxruntime's lattice renders (the lattice without its kernel)."""
    lattice = runtime.lattice
    runtime.lattice = dataclasses.replace(lattice, kernel=None)
    try:
        sample = lattice_sampler(runtime, spec)
        out = new_image(spec)
        for t in tiles(spec.height, spec.width, 1, 1024):
            render_tile(spec, t, sample(t), out)
        return out
    finally:
        runtime.lattice = lattice


@pytest.mark.parametrize("label", list(MODELS))
@pytest.mark.parametrize("view", FLAT)
def test_the_kernels_pixels_are_the_numpy_lattices(models, label, view):
    runtime = models[label]
    assert runtime.lattice is not None and runtime.lattice.kernel is not None
    w, h, matrix, viewport, _ = VIEWS[view]
    spec = RenderSpec(w, h, matrix, viewport)
    painted = new_image(spec)
    paint = lattice_painter(runtime, spec, painted)
    assert paint is not None
    for t in tiles(h, w, 1, 300):  # small tiles: offsets into the render's axes, strided rows of the image
        paint(t)
    diff = np.abs(painted.astype(int) - numpy_pixels(runtime, spec).astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    # and its rgb is the whole graph's
    exact = rgb(plain_sampler(runtime.render_rgb, spec), spec)
    assert np.abs(rgb(lattice_sampler(runtime, spec), spec) - exact).max() <= PARITY


def test_without_the_kernel_numpy_and_onnxruntime_render_the_same_pixels(models, tmp_path, monkeypatch):
    w, h, matrix, viewport, _ = VIEWS["a third, odd offsets"]
    spec = RenderSpec(w, h, matrix, viewport)

    def render(runtime, factor: int) -> np.ndarray:
        out = new_image(spec)
        paint, samples = painter_for(runtime, spec, out, 256)  # the render core's choice
        assert samples == 256 * factor
        for t in tiles(h, w, 1, samples):
            paint(t)
        return out.astype(int)

    painted = render(models["grid preset storage"], KERNEL_TILE_FACTOR)
    monkeypatch.setattr(lattice_module, "_latticekernel", None)  # a service installed without a C compiler
    plain = grid_folder(tmp_path, "plain", *MODELS["grid preset storage"])  # the same model, loaded again
    assert plain.lattice is not None and plain.lattice.kernel is None
    assert np.abs(render(plain, LATTICE_TILE_FACTOR) - painted).max() <= 1


def test_renders_with_more_to_do_than_pixels_take_samples(models):
    runtime = models["grid preset storage"]
    for spec in (
        RenderSpec(30, 20, np.eye(3)[:2], supersample=2),
        RenderSpec(30, 20, np.eye(3)[:2], background=Background.parse("transparent")),
        RenderSpec(30, 20, np.array([[0.9, 0.1, 0], [-0.1, 0.9, 0]])),  # rotated: the plain path
    ):
        assert lattice_painter(runtime, spec, new_image(spec)) is None


def test_a_head_it_cannot_run_keeps_the_numpy_lattice(tmp_path):
    cfg = ImageModelConfig(
        model="sinekan", depth=2, width=8, grid_size=4, encoding=EncodingConfig("grid", image_size=[W, H])
    )
    torch.manual_seed(0)
    export_image_model(
        ImageINR(cfg).eval(), FitConfig(model=cfg), tmp_path / "k", {"size": [W, H]}, {}, {}, np.zeros((4, 4, 3))
    )
    runtime = runtime_for(tmp_path / "k", read_spec(tmp_path / "k"), 1, RuntimeOptions())
    assert runtime.load(), runtime.error
    assert runtime.lattice is not None and runtime.lattice.kernel is None
    spec = RenderSpec(20, 20, np.eye(3)[:2])
    assert lattice_painter(runtime, spec, new_image(spec)) is None and lattice_sampler(runtime, spec) is not None


def test_a_kernel_that_disagrees_with_its_graph_is_left_off(tmp_path, monkeypatch, caplog):
    real = Kernel.of

    def off(levels, head):
        kernel = real(levels, head)
        (w, b), *rest = kernel.layers
        return dataclasses.replace(kernel, layers=((w, b + np.float32(0.05)), *rest))

    monkeypatch.setattr(Kernel, "of", off)
    runtime = grid_folder(tmp_path, "off", {"grid_table_bits": 8, "grid_finest_features": 1}, True)
    assert runtime.ready and runtime.lattice is not None and runtime.lattice.kernel is None
    assert "lattice kernel is off" in caplog.text


@pytest.fixture(scope="module")
def kernel_args(models):
    lattice = models["grid preset storage"].lattice
    kernel = lattice.kernel
    axes = kernel.axes(lattice.axes(np.linspace(0, 1, 40), np.linspace(0, 1, 30)))
    return kernel, axes


def call(kernel: Kernel, axes, x0=0, y0=0, out=None, levels=None, layers=None):
    out = np.zeros((30, 40, 3), np.float32) if out is None else out
    lattice_module._latticekernel.tile(
        kernel.levels if levels is None else levels,
        kernel.layers if layers is None else layers,
        kernel.sigmoid,
        axes,
        x0,
        y0,
        out,
    )
    return out


def test_arrays_handed_wrongly_are_refused(kernel_args):
    kernel, axes = kernel_args
    assert np.isfinite(call(kernel, axes)).all()
    cols_first = axes[0][0].copy()
    cols_first[3] = 10**6  # a cell beyond the table
    with pytest.raises(ValueError, match="outside"):
        call(kernel, (((cols_first, *axes[0][1:]),) + axes[1:]))
    with pytest.raises(ValueError, match="tile"):  # a tile beyond the render's columns
        call(kernel, axes, x0=5)
    with pytest.raises(ValueError, match="out"):
        call(kernel, axes, out=np.zeros((30, 40, 3)))  # float64
    with pytest.raises(ValueError, match="out"):
        call(kernel, axes, out=np.zeros((30, 40, 4), np.uint8))
    with pytest.raises(ValueError, match="table"):
        call(kernel, axes, levels=((kernel.levels[0][0].astype(np.int16), *kernel.levels[0][1:]), *kernel.levels[1:]))
    (w, b), *rest = kernel.layers
    with pytest.raises(ValueError, match="layer"):
        call(kernel, axes, layers=((w[:, :8].copy(), b), *rest))
    with pytest.raises(ValueError, match="axes|levels"):
        call(kernel, axes[:-1])


def test_other_threads_run_while_it_works(models):
    lattice = models["grid preset storage"].lattice
    xs, ys = np.linspace(0, 1, 2000), np.linspace(0, 1, 2000)
    axes = lattice.kernel.axes(lattice.axes(xs, ys))
    out = np.empty((len(ys), len(xs), 3), np.uint8)
    stamps, stop = [], threading.Event()

    def tick():  # wakes every millisecond; it needs the GIL to note the time
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        start = time.perf_counter()
        lattice.kernel.tile(axes, 0, 0, out)
        end = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
    # the GIL released: the ticker kept noting the time in the middle of the call
    middle = [t for t in stamps if start + 0.25 * (end - start) < t < start + 0.75 * (end - start)]
    assert middle, f"no tick during the middle of a {end - start:.3f} s call"


@pytest.mark.parametrize(
    "shape, x0, y0",
    [((30, 1, 3), 40, 0), ((1, 40, 3), 0, 30), ((30, 40, 3), -1, 0), ((30, 40, 3), 0, -1), ((31, 40, 3), 0, 0)],
)
def test_a_tile_past_the_renders_edges_is_refused_before_the_kernel_runs(kernel_args, shape, x0, y0):
    kernel, axes = kernel_args
    with pytest.raises(ValueError, match="outside"):
        kernel.tile(axes, x0, y0, np.zeros(shape, np.uint8))


@pytest.mark.parametrize("shape, x0, y0", [((0, 40, 3), 0, 30), ((30, 0, 3), 40, 0), ((0, 0, 3), 0, 0)])
def test_an_empty_tile_at_the_edge_writes_nothing(kernel_args, shape, x0, y0):
    kernel, axes = kernel_args
    kernel.tile(axes, x0, y0, np.zeros(shape, np.uint8))  # no scratch sized by an empty span of columns
    call(kernel, axes, x0, y0, np.zeros(shape, np.float32))


def test_one_pixel_tiles_at_the_last_column_and_row_are_the_whole_tiles(kernel_args):
    kernel, axes = kernel_args
    whole = call(kernel, axes)
    for x0, y0 in ((39, 29), (39, 0), (0, 29)):
        one = np.zeros((1, 1, 3), np.float32)
        kernel.tile(axes, x0, y0, one)
        assert np.array_equal(one[0, 0], whole[y0, x0])


def test_a_lattice_with_the_kernel_makes_no_head_session_until_the_head_runs(tmp_path):
    # the kernel runs the head itself: a session made at every load cost each resident model its memory and a
    # cold tile its making; the numpy lattice (no kernel, or one that disagrees) makes it on its first run
    runtime = grid_folder(tmp_path, "lazy", {"grid_table_bits": 8, "grid_finest_features": 1}, True)
    lattice = runtime.lattice
    assert lattice.kernel is not None and lattice.head._session is None
    w, h, matrix, viewport, _ = VIEWS["half scale"]
    spec = RenderSpec(w, h, matrix, viewport)
    painted = new_image(spec)
    for t in tiles(h, w, 1, 1024):
        lattice_painter(runtime, spec, painted)(t)
    assert lattice.head._session is None
    assert np.abs(numpy_pixels(runtime, spec).astype(int) - painted.astype(int)).max() <= 1
    assert lattice.head._session is not None
