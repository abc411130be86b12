"""What the residency counts for a version before a quiet load has measured it (service/engine/measure.py): a grid
photo's packed corner cells as its export recorded them predict its bytes whatever the coding of its file; its
file's size does not (a coded photo holds ~11-17 bytes in memory per file byte, an uncoded one ~4)."""

from __future__ import annotations

import json

from modelrepo import read_spec
from service.engine.measure import FIRST_PACKED_RATIO, PACKED_MIN, Measure
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from tests.service.engine.test_residency import PHOTO, copy_model
from training.encodings.grid_code import code_tables


def coded_copy(tmp_path, name: str):
    from tests.service.engine.test_coded_tables import with_file

    copy_model(PHOTO, tmp_path / name)
    coded, _ = code_tables((PHOTO / "1" / "model.onnx").read_bytes())
    with_file(tmp_path / name, coded)
    return tmp_path / name


def runtime(folder):
    r = runtime_for(folder, read_spec(folder), 1, RuntimeOptions())
    assert r.describe(), r.error
    return r


def test_a_grid_photo_is_estimated_from_its_packed_cells_whatever_its_files_coding(tmp_path):
    plain, coded = runtime(PHOTO), runtime(coded_copy(tmp_path, "coded"))
    packed = json.loads((PHOTO / "1" / "metadata.json").read_text())["export"]["tables"]["packed_bytes"]
    assert coded.file_bytes() < 0.7 * plain.file_bytes()
    m = Measure()
    assert Measure.basis(plain) == Measure.basis(coded) == ("packed", packed)
    assert m.estimate(plain) == m.estimate(coded) == int(packed * FIRST_PACKED_RATIO)
    Measure().load(runtime(coded_copy(tmp_path, "first")))  # a process's first load takes its one-time allocations
    m.load(plain)  # quiet: its measured bytes per packed byte are the ratio from now on
    assert plain.bytes_quiet and packed <= plain.bytes <= 1.3 * packed
    assert abs(m.estimate(coded) - plain.bytes) <= 1  # the coded copy's estimate is the plain one's measure
    assert m.room(coded) >= m.estimate(coded)


def test_other_models_and_small_grids_are_estimated_from_their_files(model_repo, tmp_path):
    digits = runtime(model_repo / "digits")
    assert digits.packed_bytes() is None and Measure.basis(digits) == ("file", digits.file_bytes())
    small = runtime(coded_copy(tmp_path, "small"))  # a grid whose cells are fewer than its fixed costs predict
    meta = small.path / "1" / "metadata.json"
    record = json.loads(meta.read_text())
    record["export"]["tables"]["packed_bytes"] = PACKED_MIN - 1
    meta.write_text(json.dumps(record))
    assert Measure.basis(runtime(small.path)) == ("file", small.file_bytes())
