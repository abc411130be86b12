"""A photo model whose tables are entropy-coded in its ONNX file (modelrepo/tablecode.py) on the real server: it
renders the same bytes as the uncoded file, with the session cache off and through it (service/engine/modelfile.py
decodes the tables with numpy; onnxruntime never runs the decoding nodes), and a coded table that does not decode is
a failed version with one reason, the others served."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from modelrepo import read_spec, sha256_bytes, tablecode
from service.engine.modelfile import model_source
from service.engine.runtime import RuntimeOptions
from service.engine.session_cache import SessionCache
from service.engine.tasks import runtime_for
from tests.servers import Server
from tests.service.engine.test_residency import PHOTO, copy_model
from training.encodings.grid_code import code_tables

ROOT = Path(__file__).resolve().parents[3]

TILE = "/iiif/3/{name}/0,0,512,512/256,/0/default.png"
NO_RENDER_CACHE = {"INR_RENDER_CACHE_BYTES": "0"}


def with_file(folder: Path, onnx_bytes: bytes) -> None:
    """Version 1's model.onnx replaced (its recorded sha256 too)."""
    path = folder / "1" / "model.onnx"
    path.unlink()  # a hard link to the bundled file: written anew, not through the link
    path.write_bytes(onnx_bytes)
    meta = folder / "1" / "metadata.json"
    record = json.loads(meta.read_text())
    record["onnx_sha256"] = sha256_bytes(onnx_bytes)
    meta.unlink()
    meta.write_text(json.dumps(record))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """`plain`: the bundled photo; `coded`: the same with its tables coded; `ans`: context-coded
    (modelrepo/ctxcode.py); `broken`: a coded table damaged."""
    repo = tmp_path_factory.mktemp("coded")
    copy_model(PHOTO, repo / "plain")
    coded, report = code_tables((PHOTO / "1" / "model.onnx").read_bytes())
    ans, report_ans = code_tables((PHOTO / "1" / "model.onnx").read_bytes(), "ans")
    assert report["coded_tables"] >= 1 and report_ans["coded_tables"] >= report["coded_tables"]
    assert report_ans["coded_bytes"] < report["coded_bytes"]
    for name in ("coded", "broken", "ans"):
        copy_model(PHOTO, repo / name)
    with_file(repo / "coded", coded)
    with_file(repo / "ans", ans)
    at = coded.index(tablecode.MAGIC) + 6  # the table's shape in the header: no longer what its bytes hold
    with_file(repo / "broken", coded[:at] + bytes([coded[at] ^ 0x40]) + coded[at + 1 :])
    return repo


def tile(url: str, name: str) -> httpx.Response:
    return httpx.get(url + TILE.format(name=name), timeout=120)


@pytest.mark.parametrize("cache", ["off", "on"])
def test_a_coded_model_renders_the_bytes_of_the_uncoded_one(repo, cache, tmp_path):
    folder = str(tmp_path / "sessions") if cache == "on" else "off"
    srv = Server(repo, "--session-cache", folder, "--grpc-port", "0", env=NO_RENDER_CACHE)
    with srv.running():
        expected = tile(srv.url, "plain")
        assert expected.status_code == 200
        for name in ("coded", "ans"):
            got = tile(srv.url, name)
            assert got.status_code == 200 and got.content == expected.content
        body = {"inputs": [{"name": "coords", "shape": [3, 2], "datatype": "FP32", "data": [0, 0, 0.5, 0.5, 1, 1]}]}
        names = ("plain", "coded", "ans")
        answers = [httpx.post(f"{srv.url}/v2/models/{n}/infer", json=body, timeout=60) for n in names]
        assert [a.status_code for a in answers] == [200] * 3
        assert answers[0].json()["outputs"] == answers[1].json()["outputs"] == answers[2].json()["outputs"]
        broken = tile(srv.url, "broken")  # failed at its load, with the reason; the server stays up
        assert broken.status_code == 503
        assert "model.onnx: encoding.tables." in broken.json()["error"] and "coded table" in broken.json()["error"]
        (version,) = httpx.get(f"{srv.url}/v1/models/broken", timeout=60).json()["versions"]
        assert version["status"] == "failed" and "header does not add up" in version["error"]
        assert tile(srv.url, "plain").status_code == 200
    if cache == "on":  # their CPU sessions share the tables with the lattice: nothing left to optimise and cache
        assert not list(Path(folder).glob("*.ort"))


def test_model_source_reads_a_plain_file_by_path_and_decodes_a_coded_one(repo):
    plain = repo / "plain" / "1" / "model.onnx"
    assert model_source(plain) == str(plain)
    data = model_source(repo / "coded" / "1" / "model.onnx")
    assert isinstance(data, bytes) and tablecode.SUFFIX.encode() not in data
    assert sorted(p.name for p in (repo / "coded" / "1").iterdir()) == sorted(p.name for p in (PHOTO / "1").iterdir())


def test_a_coded_model_has_the_lattice_of_the_uncoded_one(repo):
    """The lattice renders (service/engine/lattice.py) read the decoded tables: the same levels, codes and all."""
    lattices = []
    for name in ("plain", "coded", "ans"):
        runtime = runtime_for(repo / name, read_spec(repo / name), 1, RuntimeOptions())
        assert runtime.load(), runtime.error
        assert runtime.lattice is not None
        lattices.append(runtime.lattice.levels)
    plain = lattices[0]
    for coded in lattices[1:]:
        assert len(plain) == len(coded)
        for a, b in zip(plain, coded):
            assert a.table.dtype == b.table.dtype == np.uint8 and np.array_equal(a.table, b.table)
            assert np.array_equal(a.scale, b.scale) and np.array_equal(a.low, b.low)


MEASURED = """
import sys
from pathlib import Path
from modelrepo import read_spec
from service.engine.measure import Measure
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from service.engine.memory import one_malloc_arena
one_malloc_arena()
folder = Path(sys.argv[1])
runtime = runtime_for(folder, read_spec(folder), 1, RuntimeOptions())
Measure().load(runtime)
assert runtime.ready and runtime.bytes_quiet, runtime.error
print(runtime.bytes, runtime.session._model_bytes is None)
"""


def test_a_coded_model_costs_what_the_uncoded_one_costs(repo):
    # what the residency counts for a model (its measured load, service/engine/measure.py) is what the same graph
    # costs from an uncoded file: onnxruntime kept the decoded file's bytes a session was made from, for the
    # session's life (the bundled photo's 3 MB per model, uncounted by the uncoded models' estimates)
    measured = {}
    for name in ("plain", "coded"):
        out = subprocess.run(
            [sys.executable, "-c", MEASURED, str(repo / name)], capture_output=True, text=True, check=True, cwd=ROOT
        )
        grown, dropped = out.stdout.split()
        measured[name] = int(grown)
        assert dropped == "True"
    assert measured["coded"] <= measured["plain"] + 2**20, measured


def test_a_coded_models_load_decodes_each_table_once(repo, tmp_path, monkeypatch):
    # its session and its lattice are made from one decode (service/engine/modelfile.py, ModelFile), on the first
    # load (the session cache empty) and on a load from the cache (the lattice alone decodes)
    tables = code_tables((PHOTO / "1" / "model.onnx").read_bytes())[1]["coded_tables"]
    calls = []
    real = tablecode.decode
    monkeypatch.setattr(tablecode, "decode", lambda data: calls.append(1) or real(data))
    for load in ("first", "from the session cache"):
        calls.clear()
        options = RuntimeOptions(session_cache=SessionCache(tmp_path / "sessions", 2**30))
        runtime = runtime_for(repo / "coded", read_spec(repo / "coded"), 1, options)
        assert runtime.load(), runtime.error
        assert runtime.lattice is not None
        assert len(calls) == tables, (load, len(calls), tables)
