"""`python -m modelrepo import FILE.onnx --name NAME`: a network made elsewhere (a SIREN exported by torch) becomes a
model folder after its checks, printing what was inferred; a graph that cannot be the model asked for is one line on
stderr, exit code 2, and nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from onnx import TensorProto, helper

from modelrepo import read_spec
from tests.modelrepo import foreign_nets as F

ROOT = F.Path(__file__).resolve().parents[2]


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "modelrepo", "import", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def siren(tmp_path_factory):
    path = tmp_path_factory.mktemp("siren") / "siren.onnx"
    path.write_bytes(F.siren_onnx())
    return path


def test_a_siren_is_imported_with_its_convention(tmp_path, siren):
    args = ["--coordinate-range=-1,1", "--coordinate-order", "yx", "--pixel-grid", "corners", "--output-range=-1,1"]
    r = run(siren, "--name", "siren", "--repository", tmp_path, *args, "--width", "40", "--height", "24")
    assert r.returncode == 0, r.stderr
    assert "image model" in r.stdout and "model_input" in r.stdout and "test render 16x16" in r.stdout
    spec = read_spec(tmp_path / "siren")
    assert spec.convention.native == (40, 24) and spec.convention.coordinate_order == "yx"
    assert (tmp_path / "siren" / "1" / "model.onnx").read_bytes() == siren.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["siren"]  # no hidden work folder left
    again = run(siren, "--name", "siren", "--repository", tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr


def bad_graph(kind: str) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    if kind == "unknown-op":
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
        g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g", [x], [y])
    else:  # wide: [N, 2] → [N, 2]
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])
        g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    "kind,words",
    [
        ("wide", ["cannot be an image model", "output 'y'", "[-1, 2]"]),
        ("unknown-op", ["onnx.checker", "NoSuchOp"]),
        ("junk", ["onnx.checker"]),
    ],
)
def test_a_graph_that_cannot_be_an_image_model_is_one_line_and_exit_2(tmp_path, kind, words):
    path = tmp_path / "in.onnx"
    path.write_bytes(b"not onnx at all" if kind == "junk" else bad_graph(kind))
    repo = tmp_path / "repo"
    r = run(path, "--name", "m", "--repository", repo, "--image")
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert not repo.exists() or list(repo.iterdir()) == []


def test_nan_values_fail_the_test_render(tmp_path):
    """Log(-(x + 1)) is NaN wherever x > -1: a 2-channel output is refused first, so the NaN graph gets 3 channels."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    cols = helper.make_tensor("cols", TensorProto.INT64, [3], [0, 1, 0])
    nodes = [helper.make_node("Gather", ["x", "cols"], ["x3"], axis=1), helper.make_node("Log", ["x3"], ["y"])]
    g = helper.make_graph(nodes, "g", [x], [y], [cols])
    path = tmp_path / "nan.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    r = run(path, "--name", "nan", "--repository", tmp_path / "repo", "--coordinate-range=-1,1")
    assert r.returncode == 2 and "not finite" in r.stderr and "output 'y'" in r.stderr, r.stderr
    assert list((tmp_path / "repo").iterdir()) == []


def test_a_generic_graph_is_imported_for_v2(tmp_path):
    path = tmp_path / "clf.onnx"
    path.write_bytes(F.classifier_onnx())
    r = run(path, "--name", "clf", "--repository", tmp_path / "repo", "--max-batch-size", "64")
    assert r.returncode == 0 and "generic model (V2 only)" in r.stdout, r.stderr
    spec = read_spec(tmp_path / "repo" / "clf")
    assert spec.task == "generic" and spec.max_batch_size == 64
    bad = run(path, "--name", "../up", "--repository", tmp_path / "repo")
    assert bad.returncode == 2 and "--name" in bad.stderr
