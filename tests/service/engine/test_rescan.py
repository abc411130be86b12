"""The poll-mode rescan of an on-demand repository (service/engine/control.py, `_rescan_listed`), in process on real
model folders: what it notices for a model read but not in memory (one stat of its folder) and for one in memory (its
version folders too), and that an unchanged repository reports nothing."""

from __future__ import annotations

import json
import os

import pytest

from service.engine.control import ModelControl
from service.engine.registry import Registry
from service.engine.residency import Residency, ResidencyOptions
from service.engine.runtime import RuntimeOptions
from tests.service.engine.live import add_version, private_repo


@pytest.fixture
def control(model_repo, tmp_path):
    repo = private_repo(model_repo, tmp_path / "repo", names=("astronaut", "digits"))
    registry = Registry(repo, RuntimeOptions(), Residency(ResidencyOptions(budget=2**30)))
    registry.list_all()
    return ModelControl(registry, "poll", on_demand=True)


def test_unchanged_reports_nothing_and_a_never_read_model_is_not_read(control):
    assert control.poll_once() == []
    assert control.registry.models == {}  # listed, never asked for: nothing read


def test_a_new_version_of_a_model_read_but_not_in_memory(control):
    registry = control.registry
    assert registry.get("digits").serving.version == 1 and not registry.resident_names()
    add_version(registry.root / "digits")  # renamed into place: the model folder's mtime changes
    assert control.poll_once() == ["digits"]
    assert registry.get("digits").serving.version == 2
    assert not registry.get("digits").serving.resident  # read again, still loaded on first use
    assert control.poll_once() == []


def test_a_file_replaced_inside_a_resident_version(control):
    registry = control.registry
    runtime = registry.get("digits").serving
    registry.residency.load_now(runtime)
    assert registry.resident_names() == {"digits"}
    record = runtime.version_dir / "metadata.json"
    meta = json.loads(record.read_text())
    tmp = record.with_name(".metadata.json.tmp")
    tmp.write_text(json.dumps({**meta, "note": "rewritten"}))
    os.replace(tmp, record)  # only the version folder's mtime changes: seen because the model is in memory
    assert control.poll_once() == ["digits"]
    again = registry.get("digits").serving
    assert again is not runtime and again.resident and again.record.metadata.get("note") == "rewritten"


def test_a_removed_and_an_added_folder(control):
    registry = control.registry
    registry.get("astronaut")
    (registry.root / "astronaut").rename(registry.root.parent / "astronaut")
    os.utime(registry.root, ns=(0, 0))  # the listing is trusted only once the folder's mtime has settled
    assert control.poll_once() == ["astronaut"]
    assert "astronaut" not in registry.names()
    (registry.root.parent / "astronaut").rename(registry.root / "elsewhere")
    os.utime(registry.root, ns=(10**9, 10**9))
    assert control.poll_once() == ["elsewhere"]
    assert registry.names() == ["digits", "elsewhere"]
