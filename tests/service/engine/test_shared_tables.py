"""One copy of a dense grid's tables (service/engine/shared_tables.py): the CPU session reads the corner cells the
service packed, the lattice reads its tables as views of them, and both give what the file's own graph gives.

Models are built and exported by the training code (tests/service/engine/test_lattice.py's `grid_folder`) in each
storage: 8-bit tables in two runs (a native luma level of one feature), float32 tables (shared), float16 tables (not
shared: the plain session). The bundled photo is measured as the residency measures it, shared and not.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from modelrepo.onnxfile import decoded_model
from service.engine import shared_tables
from service.engine.lattice_graph import read_lattice
from service.engine.modelfile import CPU, ModelFile
from service.engine.sessions import session_options
from service.engine.shared_tables import pack, share
from tests.service.engine.test_lattice import STORAGE, grid_folder
from tests.service.engine.test_residency import PHOTO

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shared")
    return {label: grid_folder(tmp, f"m{i}", enc, fp16) for i, (label, (enc, fp16)) in enumerate(STORAGE.items())}


def coords(n: int = 5000) -> np.ndarray:
    """Points over the unit square and beyond it (the graph clips them), and its corners and edges exactly."""
    x = np.random.default_rng(0).random((n, 2)).astype(np.float32) * 1.4 - 0.2
    edges = np.array([[0, 0], [1, 1], [0, 1], [1, 0], [0.5, 0], [1, 0.5], [1e-7, 1 - 1e-7]], np.float32)
    return np.concatenate([x, edges])


def plain_session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(decoded_model(path.read_bytes()).SerializeToString(), providers=[CPU])


@pytest.mark.parametrize("storage", ["8-bit, native luma", "float32"])
def test_a_shared_session_gives_the_files_own_answers_bitwise(models, storage):
    runtime = models[storage]
    onnx_path = runtime.path / "1" / "model.onnx"
    shared, values = runtime.session.shared_tables
    assert len(shared.corners) == (2 if storage.startswith("8-bit") else 1)  # one packed table per run
    x = coords()
    got = runtime.session.run(["rgb"], {"coords": x})[0]
    assert np.array_equal(got, plain_session(onnx_path).run(["rgb"], {"coords": x})[0])
    # the lattice's tables are the stored ones, as views of the session's corners: one copy in memory
    stored, _ = read_lattice(decoded_model(onnx_path.read_bytes()))
    for view, table in zip(runtime.lattice.levels, stored):
        assert np.array_equal(view.table, table.table) and view.table.dtype == table.table.dtype
        assert any(np.shares_memory(view.table, c) for c in shared.corners.values())
        assert not view.table.flags.writeable
    assert runtime.lattice.kernel is not None  # the kernel reads the strided views and agreed at load


def test_float16_tables_keep_the_plain_session(models):
    runtime = models["float16"]
    assert getattr(runtime.session, "shared_tables", None) is None
    assert runtime.lattice is not None  # the lattice keeps its own float32 copy, as before


def test_the_kernel_paints_strided_tables_as_contiguous_ones(models):
    lattice = models["8-bit, native luma"].lattice
    xs, ys = np.linspace(-0.05, 1.05, 77), np.linspace(0.02, 0.9, 41)
    axes = lattice.kernel.axes(lattice.axes(xs, ys))
    copies = dataclasses.replace(
        lattice.kernel, levels=tuple((np.ascontiguousarray(t), s, lo) for t, s, lo in lattice.kernel.levels)
    )
    outs = []
    for kernel in (lattice.kernel, copies):
        out = np.empty((len(ys), len(xs), 3), np.uint8)
        kernel.tile(axes, 0, 0, out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


def test_pack_is_the_graphs_layout():
    t = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)  # F=2, ry=3, rx=4
    out = np.empty(((3 + 1) * (4 + 1), 8), np.uint8)
    view = pack(t, out)
    assert np.array_equal(view, t)
    cells = out.reshape(4, 5, 4, 2)

    def p(i, j):  # the table edge-padded by one cell
        return t[:, min(max(i - 1, 0), 2), min(max(j - 1, 0), 3)]

    for i in range(4):
        for j in range(5):
            for k, (dy, dx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
                assert np.array_equal(cells[i, j, k], p(i + dy, j + dx)), (i, j, k)
    three = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2)  # 12 bytes a cell corner: no integer view
    out3 = np.empty((9, 12), np.float32)
    assert np.array_equal(pack(three, out3), three)
    for shape in ((1, 1, 1), (2, 1, 5), (1, 6, 1)):  # one cell, one row, one column: every corner the edge's
        t = np.arange(np.prod(shape), dtype=np.uint8).reshape(shape)
        out = np.empty(((shape[1] + 1) * (shape[2] + 1), 4 * shape[0]), np.uint8)
        assert np.array_equal(pack(t, out), t)
        assert np.array_equal(out.reshape(shape[1] + 1, shape[2] + 1, 4, shape[0])[0, 0, 3], t[:, 0, 0])


def test_a_graph_packed_another_way_or_other_tables_are_not_shared(models):
    onnx_path = models["8-bit, native luma"].path / "1" / "model.onnx"
    levels, _ = read_lattice(decoded_model(onnx_path.read_bytes()))
    assert share(decoded_model(onnx_path.read_bytes()), levels) is not None
    model = decoded_model(onnx_path.read_bytes())
    for n in model.graph.node:
        if n.name.endswith("/corner_values"):  # a Gather that is not the exporter's: its packing is not known
            n.name = n.name.replace("corner_values", "values")
    assert share(model, levels) is None
    broken = dataclasses.replace(levels[0], table=levels[0].table[:, :, :-1])  # not the graph's table
    assert share(decoded_model(onnx_path.read_bytes()), [broken, *levels[1:]]) is None


def test_shared_tables_that_disagree_fall_back_to_the_plain_session(tmp_path, monkeypatch, caplog):
    real = shared_tables.pack

    def shifted(table, out):  # a packing defect: corner cells one column off from the tables
        view = real(table, out)
        out[:] = np.roll(out, 1, axis=0)
        return view

    monkeypatch.setattr(shared_tables, "pack", shifted)
    runtime = grid_folder(tmp_path, "off", {"grid_table_bits": 8, "grid_finest_features": 1}, True)
    assert runtime.ready and runtime.lattice is not None
    assert getattr(runtime.session, "shared_tables", None) is None
    assert "shared tables disagree" in caplog.text
    x = coords(500)
    want = plain_session(runtime.path / "1" / "model.onnx").run(["rgb"], {"coords": x})[0]
    assert np.array_equal(runtime.session.run(["rgb"], {"coords": x})[0], want)


def test_a_cuda_or_unshared_model_file_reads_as_before(models):
    onnx_path = models["8-bit, native luma"].path / "1" / "model.onnx"
    f = ModelFile(onnx_path, share=False)
    assert f.tables() is None and f.source(cpu=True) == str(onnx_path)  # an uncoded file: onnxruntime reads it
    assert ModelFile(onnx_path).tables() is not None
    session = ort.InferenceSession(str(onnx_path), session_options(1, False), providers=[CPU])
    assert session.get_inputs()[0].name == "coords"


MEASURED = """
import sys
from pathlib import Path
from modelrepo import read_spec
from service.engine import modelfile
from service.engine.measure import Measure
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.engine.memory import one_malloc_arena
one_malloc_arena()
if sys.argv[2] == "plain":
    modelfile.ModelFile.tables = lambda self: None
folder = Path(sys.argv[1])
measure = Measure()
for copy in range(3):  # the first load of a process measures its one-time allocations too
    runtime = runtime_for(folder, read_spec(folder), 1, RuntimeOptions())
    measure.load(runtime)
    assert runtime.ready and runtime.bytes_quiet and runtime.lattice is not None, runtime.error
    print(runtime.bytes)
"""


def test_a_shared_photo_model_costs_one_copy_of_its_tables_less():
    """The bundled photo as the residency measures it: sharing saves its lattice's copy of the tables (the packed
    corners hold them 4 times over, the lattice's copy once more)."""
    levels, _ = read_lattice(decoded_model((PHOTO / "1" / "model.onnx").read_bytes()))
    tables = sum(lv.table.nbytes for lv in levels)
    measured = {}
    for how in ("shared", "plain"):
        out = subprocess.run(
            [sys.executable, "-c", MEASURED, str(PHOTO), how], capture_output=True, text=True, check=True, cwd=ROOT
        )
        measured[how] = sorted(int(b) for b in out.stdout.split())[1]  # the median of three loads
    assert measured["shared"] <= measured["plain"] - tables // 2, (measured, tables)
