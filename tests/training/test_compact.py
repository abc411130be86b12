"""The export's graph compaction (training/compact.py) on real fits of a small photo, Rice- and context-coded: the
file is smaller, answers bit for bit as before through onnxruntime, and the service still finds in it what it reads
by name (the lattice's levels and head, the shared packed corners), with the graph's inputs and outputs unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from modelrepo.onnxfile import decoded, decoded_model
from service.engine.lattice_graph import read_lattice
from service.engine.shared_tables import share
from tests.training.test_grid_rate import grid_fit
from training import fit_image
from training.compact import compact_graph
from training.fit_image import finish
from training.image_models import ImageINR


@pytest.fixture(scope="module")
def fitted():
    return grid_fit(96, 20)


def files(fitted, code: str, monkeypatch) -> tuple[bytes, bytes]:
    """(the file as exported before compaction, as exported now) of the fit finished with table code `code`."""
    cfg, img, state = fitted
    enc = dataclasses.replace(cfg.model.encoding, table_code=code)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoding=enc))
    model = ImageINR(cfg.model)
    model.load_state_dict(state)
    model = finish(model.eval(), cfg, img, {})
    size = [img.shape[1], img.shape[0]]
    now = fit_image.image_file(model, cfg, size)[0]
    monkeypatch.setattr(fit_image, "compact_graph", lambda data: (data, {}))
    return fit_image.image_file(model, cfg, size)[0], now


def run(data: bytes, coords: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(decoded(data), providers=["CPUExecutionProvider"])
    return s.run(["rgb"], {"coords": coords})[0]


@pytest.mark.parametrize("code", ["rice", "ans"])
def test_the_compacted_file_is_smaller_and_answers_bit_for_bit(fitted, code, monkeypatch):
    before, after = files(fitted, code, monkeypatch)
    assert len(after) < 0.85 * len(before)
    coords = np.random.default_rng(0).random((4096, 2), dtype=np.float32) * 1.2 - 0.1
    assert np.array_equal(run(before, coords), run(after, coords))
    a, b = onnx.load_from_string(before).graph, onnx.load_from_string(after).graph
    assert [v.name for v in a.input] == [v.name for v in b.input] and [v.name for v in b.output] == ["rgb"]
    assert compact_graph(after)[0] == after  # a second pass finds nothing more to do


@pytest.mark.parametrize("code", ["rice", "ans"])
def test_the_service_reads_the_compacted_file_as_it_read_the_old(fitted, code, monkeypatch):
    before, after = files(fitted, code, monkeypatch)
    (old_levels, old_head), (levels, head) = read_lattice(decoded_model(before)), read_lattice(decoded_model(after))
    assert len(levels) == len(old_levels) and all(np.array_equal(x.table, y.table) for x, y in zip(levels, old_levels))
    x = np.random.default_rng(1).random((sum(lv.features for lv in levels), 64), dtype=np.float32)
    heads = [ort.InferenceSession(h, providers=["CPUExecutionProvider"]) for h in (old_head, head)]
    assert np.array_equal(*[h.run(["rgb"], {"grid_features": x})[0] for h in heads])
    assert share(decoded_model(after), levels) is not None  # the packed corners still found by their names
