"""Several folders served as one (modelrepo/union.py): every model listed, a name in two served from the first and
logged once, each call on a model answered by the folder that holds it, a version written into the last."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from modelrepo import LocalRepository, ModelSpec, read_version
from modelrepo.union import UnionRepository
from tests.modelrepo.test_s3 import tiny_onnx

ROOT = Path(__file__).resolve().parents[2]


def test_models_of_both_folders_served_the_first_wins_and_fits_go_to_the_last(tmp_path, caplog):
    models, fits = tmp_path / "models", tmp_path / "fits"
    shutil.copytree(ROOT / "models" / "astronaut", models / "astronaut")
    union = UnionRepository([LocalRepository(models), LocalRepository(fits)])
    assert union.scan() == {"astronaut": models / "astronaut"}  # a fits' folder not made yet lists nothing

    written = union.write_version("snap", ModelSpec.for_task("snap", "image"), tiny_onnx(), {"seed": 0})
    assert written.record.version == 1 and (fits / "snap" / "1" / "model.onnx").is_file()
    assert not (models / "snap").exists()
    assert union.scan() == {"astronaut": models / "astronaut", "snap": fits / "snap"}
    assert union.folder("snap") == fits / "snap" and union.path("snap") == fits / "snap"
    assert union.task_of("snap") == "image" and union.task_of("astronaut") == "image"
    stamp = union.stamp("snap")
    union.write_version("snap", ModelSpec.for_task("snap", "image"), tiny_onnx(1), {"seed": 1})
    with union.changes() as differs:
        assert differs("snap", stamp, True) and not differs("astronaut", union.stamp("astronaut"), True)
    assert read_version(fits / "snap", 2).version == 2

    shutil.copytree(models / "astronaut", fits / "astronaut")  # the same name in both: the first folder's
    with caplog.at_level(logging.WARNING, "modelrepo.union"):
        assert union.scan()["astronaut"] == models / "astronaut"
        union.scan()
    assert [r.getMessage() for r in caplog.records].count(
        f"model 'astronaut' is in {models} and in {fits}: served from {models}"
    ) == 1
