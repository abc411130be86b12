"""`python -m modelrepo decode` (modelrepo/uncoded.py): a context-coded grid model (modelrepo/ctxcode.py), which
plain onnxruntime cannot load, copied into another repository with its tables decoded: plain onnxruntime loads the
copy and answers as the service answers the coded model; the copy's recorded sha256 is its file's; a destination
that exists, or a folder that is not a model, is one line and exit code 2 with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from modelrepo import ctxcode, onnxfile, sha256_bytes
from tests.service.engine.test_coded_tables import with_file
from tests.service.engine.test_residency import PHOTO, copy_model
from training.encodings.grid_code import code_tables

ROOT = Path(__file__).resolve().parents[2]
COORDS = np.array([[0.1, 0.2], [0.5, 0.5], [0.93, 0.71]], np.float32)


def decode_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "modelrepo", "decode", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


@pytest.fixture(scope="module")
def coded(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("ans")
    copy_model(PHOTO, repo / "dandelion")
    data, report = code_tables((PHOTO / "1" / "model.onnx").read_bytes(), "ans")
    assert report["coded_tables"] >= 1 and ctxcode.DOMAIN.encode() in data
    with_file(repo / "dandelion", data)
    return repo / "dandelion"


def test_the_copy_loads_in_plain_onnxruntime_and_answers_as_the_coded_model(coded, tmp_path):
    with pytest.raises(Exception, match="DecodeTable|ai.inr-serve"):
        ort.InferenceSession(str(coded / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    out = decode_cli(str(coded), "--out", str(tmp_path / "triton"))
    assert out.returncode == 0, out.stderr
    assert "1/model.onnx decoded" in out.stdout
    copy = tmp_path / "triton" / "dandelion"
    plain = ort.InferenceSession(str(copy / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    served = ort.InferenceSession(
        onnxfile.decoded((coded / "1" / "model.onnx").read_bytes()), providers=["CPUExecutionProvider"]
    )  # what the service loads (service/engine/modelfile.py)
    assert np.array_equal(plain.run(None, {"coords": COORDS})[0], served.run(None, {"coords": COORDS})[0])
    record = json.loads((copy / "1" / "metadata.json").read_text())
    assert record["onnx_sha256"] == sha256_bytes((copy / "1" / "model.onnx").read_bytes())
    assert (copy / "config.pbtxt").read_text() == (coded / "config.pbtxt").read_text()


def test_refusals_are_one_line_and_write_nothing(coded, tmp_path):
    (tmp_path / "taken" / "dandelion").mkdir(parents=True)
    out = decode_cli(str(coded), "--out", str(tmp_path / "taken"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "exists" in out.stderr
    assert list((tmp_path / "taken").iterdir()) == [tmp_path / "taken" / "dandelion"]
    out = decode_cli(str(tmp_path), "--out", str(tmp_path / "new"))
    assert out.returncode == 2 and "not a model folder" in out.stderr and not (tmp_path / "new").exists()
