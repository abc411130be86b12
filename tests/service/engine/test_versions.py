"""Versions in the registry: next versions, version policies, reloads that keep the old version serving when
the new one is broken, unloads, concurrent loads. Real ONNX files from the training fixtures."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest

from modelrepo import VersionPolicy, config_text, read_spec, write_version
from service.engine.registry import Registry
from service.engine.runtime import RuntimeOptions
from service.errors import ModelNotFound, NotFound


@pytest.fixture()
def repo(model_repo, tmp_path):
    shutil.copytree(model_repo / "digits", tmp_path / "digits")
    return tmp_path


@pytest.fixture()
def registry(repo):
    reg = Registry(repo, RuntimeOptions(threads=1))
    reg.load_all()
    return reg


def add_version(repo, onnx: bytes | None = None, **meta):
    folder = repo / "digits"
    onnx = onnx if onnx is not None else (folder / "1" / "model.onnx").read_bytes()
    return write_version(folder, read_spec(folder), onnx, {"note": "v2", **meta}).record.version


def x():
    return np.zeros((2, 1, 28, 28), np.float32)


def test_a_new_version_replaces_the_old_under_latest_1(registry, repo):
    old = registry.runtime("digits")
    assert add_version(repo) == 2
    state = registry.load("digits")
    assert [v.version for v in state.versions] == [2] and state.serving.version == 2
    assert old.retired and old.predict(x())["logits"].shape == (2, 10), "a held runtime still answers"
    with pytest.raises(NotFound, match="unknown version 1 of model 'digits'; versions: 2"):
        registry.runtime("digits", 1)


def test_reloading_an_unchanged_model_keeps_its_runtimes(registry):
    before = registry.runtime("digits")
    assert registry.load("digits").serving is before and not before.retired


@pytest.mark.parametrize(
    "breakage,reason",
    [
        (lambda v: (v / "model.onnx").write_bytes(b"not onnx at all"), "sha256 of 2/model.onnx"),
        (lambda v: _rehash(v, b"not onnx at all"), "unreadable ONNX file"),
        (lambda v: _rehash(v, (v.parents[1] / "astronaut.onnx").read_bytes()), "disagrees with the spec"),
    ],
)
def test_a_broken_new_version_leaves_the_old_one_serving(registry, repo, model_repo, breakage, reason):
    shutil.copy(model_repo / "astronaut" / "1" / "model.onnx", repo / "astronaut.onnx")
    old = registry.runtime("digits")
    add_version(repo)
    breakage(repo / "digits" / "2")
    state = registry.load("digits")
    assert state.serving is old and not old.retired
    failed = state.version(2)
    assert failed is not None and failed.status == "failed" and reason in failed.error
    assert "previous ones keep serving" in state.error
    assert registry.runtime("digits").predict(x())["probabilities"].shape == (2, 10)


def _rehash(vdir, data: bytes) -> None:
    from modelrepo import sha256_bytes

    (vdir / "model.onnx").write_bytes(data)
    meta = json.loads((vdir / "metadata.json").read_text())
    (vdir / "metadata.json").write_text(json.dumps({**meta, "onnx_sha256": sha256_bytes(data)}))


def test_policy_all_serves_every_version_and_the_highest_by_default(registry, repo):
    add_version(repo)
    spec = read_spec(repo / "digits")
    (repo / "digits" / "config.pbtxt").write_text(config_text(spec.with_(version_policy=VersionPolicy("all"))))
    state = registry.load("digits")
    assert [v.version for v in state.versions] == [1, 2] and state.serving.version == 2
    assert registry.runtime("digits", 1).ready


def test_a_deleted_version_folder_is_dropped_at_the_next_load(registry, repo):
    add_version(repo)
    registry.load("digits")
    shutil.rmtree(repo / "digits" / "2")
    state = registry.load("digits")
    assert state.serving.version == 1


def test_unload_and_unknown_names(registry):
    held = registry.runtime("digits")
    registry.unload("digits")
    with pytest.raises(ModelNotFound):
        registry.get("digits")
    assert held.retired and held.predict(x())["logits"].shape == (2, 10)
    with pytest.raises(ModelNotFound, match="unknown model 'nope'"):
        registry.load("nope")
    with pytest.raises(ModelNotFound):
        registry.unload("digits")
    assert registry.load("digits").ready


def test_two_loads_of_one_name_run_one_after_the_other(registry, repo):
    add_version(repo)
    results, errors = [], []

    def load():
        try:
            results.append(registry.load("digits"))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    assert len({id(r.serving) for r in results}) == 1, "the later loads found version 2 loaded and kept it"
    assert registry.runtime("digits").version == 2


def test_a_failed_version_is_not_retried_until_its_files_change(registry, repo):
    add_version(repo)
    onnx = repo / "digits" / "2" / "model.onnx"
    good = onnx.read_bytes()
    onnx.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    first = registry.load("digits").version(2)
    assert first.status == "failed" and registry.load("digits").version(2) is first
    onnx.write_bytes(good)  # fixed in place: new mtime, the recorded sha256 matches again
    fixed = registry.load("digits")
    assert fixed.version(2) is not first and fixed.serving.version == 2
