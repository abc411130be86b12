"""The model cache's byte budget (modelrepo/diskcache.py) on a folder, without S3: two downloads side by side that
each made room before either was written, and the trim once a spared file's seconds are over."""

from __future__ import annotations

import os
import time

from modelrepo.diskcache import DiskBudget


def du(folder) -> int:
    return sum(p.lstat().st_blocks * 512 for p in [folder, *folder.rglob("*")])


def write(root, name: str, size: int = 8192):
    path = root / name / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def test_two_downloads_side_by_side_end_under_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr("modelrepo.diskcache.RECENT_S", 0.0)
    root = tmp_path / "cache" / "s3-x"
    root.mkdir(parents=True)
    old = write(root, "old")
    budget = DiskBudget(root, 1 << 30, lambda path: None)
    assert list(budget.files) == [old]
    write(root, "a").unlink()
    write(root, "b").unlink()  # the folders the two downloads will need
    budget.note(root / "a")
    budget.note(root / "b")
    budget.max_bytes = budget.bytes + 8192  # room for two files: old and one more
    budget.make_room(8192)  # a's download: the room is there
    budget.make_room(8192)  # b's, before a's file is written: the room is there too
    for name in ("a", "b"):
        time.sleep(0.01)
        budget.touch(write(root, name))
    assert not old.exists() and du(tmp_path / "cache") <= budget.max_bytes == budget.bytes


def test_a_spared_file_goes_when_its_seconds_are_over(tmp_path, monkeypatch):
    monkeypatch.setattr("modelrepo.diskcache.RECENT_S", 1.0)
    root = tmp_path / "cache" / "s3-x"
    root.mkdir(parents=True)
    budget = DiskBudget(root, 1 << 30, lambda path: None)
    first = write(root, "a")
    budget.touch(first)
    budget.note(root / "a")
    write(root, "b").unlink()
    budget.note(root / "b")
    budget.max_bytes = budget.bytes  # one file: a
    budget.make_room(8192)  # a is spared: used just now
    budget.touch(write(root, "b"))
    assert first.exists() and du(tmp_path / "cache") > budget.max_bytes
    deadline = time.monotonic() + 5
    while first.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.exists() and du(tmp_path / "cache") <= budget.max_bytes
