"""modelrepo/private_dir.py: the caches' private folders and their key (the attacks themselves are in
tests/security/test_cache_folders.py)."""

from __future__ import annotations

import os

import pytest

from modelrepo.private_dir import KEY_FILE, UnsafeFolder, default_cache, ensure, key, sign, verify


def test_the_default_is_under_xdg_cache_home_when_absolute_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache("models") == tmp_path / "inr-serve" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache("sessions") == tmp_path / "home" / ".cache" / "inr-serve" / "sessions"


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_made_folders_are_0700_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        folder = ensure(tmp_path / "a" / "b", "INR_X")
    finally:
        os.umask(old)
    for path in (folder, folder.parent):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert ensure(folder, "INR_X") == folder  # an existing private folder is taken as it is


def test_a_file_in_the_way_is_one_line_naming_the_setting(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafeFolder, match=r"cannot be made .*set INR_X$"):
        ensure(tmp_path / "file" / "cache", "INR_X")


def test_the_key_is_made_once_0600_and_refused_when_anyone_else_may_read_it(tmp_path):
    folder = ensure(tmp_path / "c", "INR_X")
    first = key(folder, "INR_X")
    assert key(folder, "INR_X") == first and len(first) == 32
    assert (folder / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in folder.iterdir()] == [KEY_FILE]  # its temporary name gone
    mac = sign(first, "name", "digest")
    assert verify(first, mac, "name", "digest") and not verify(first, mac, "other", "digest")
    assert not verify(first, None, "name", "digest")
    os.chmod(folder / KEY_FILE, 0o644)
    with pytest.raises(UnsafeFolder, match=r"\.key is not this user's key alone \(mode 0644\)"):
        key(folder, "INR_X")
