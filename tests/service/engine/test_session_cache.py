"""The session cache (service/engine/session_cache.py) on the real server: an image model's first load writes its
optimised graph, a load after an unload reads it and renders the same bytes as a server without the cache; copies
of one model share one file; a damaged file is written again; the folder stays within its bytes; a folder that
cannot be written turns the cache off and the models still serve; a bad size is one line at start. The models are
copies of the bundled Fourier-feature image: a dense grid's CPU session shares its tables with the lattice and has
no optimisation left to cache (service/engine/shared_tables.py; tests/service/engine/test_shared_tables.py)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from service.engine.session_cache import SessionCache
from tests.servers import Server
from tests.service.engine.test_residency import copy_model
from tests.service.test_startup_errors import one_line, run_cli

NO_RENDER_CACHE = {"INR_RENDER_CACHE_BYTES": "0"}  # every tile rendered
EXPLICIT = ("--grpc-port", "0", "--model-control-mode", "explicit", "--load-model", "*")
TILE = "/iiif/3/{name}/0,0,512,512/256,/0/default.png"


FOURIER = Path(__file__).resolve().parents[3] / "models" / "astronaut"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("photos")
    for name in ("a", "b"):
        copy_model(FOURIER, repo / name)
    return repo


def tile(srv: Server, name: str) -> bytes:
    r = httpx.get(srv.url + TILE.format(name=name), timeout=60)
    assert r.status_code == 200, r.text
    return r.content


def reload(srv: Server, name: str) -> None:
    """Unloaded and loaded again (explicit model control)."""
    for action in ("unload", "load"):
        r = httpx.post(f"{srv.url}/v2/repository/models/{name}/{action}", timeout=60)
        assert r.status_code == 200, r.text


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.ort"))


def test_a_load_after_an_unload_reads_the_optimised_graph(photos, tmp_path):
    cache = tmp_path / "sessions"
    plain = Server(photos, "--session-cache", "off", "--grpc-port", "0", env=NO_RENDER_CACHE)
    with plain.running():
        expected = tile(plain, "a")
    assert not cache.exists()
    srv = Server(photos, "--session-cache", str(cache), *EXPLICIT, env=NO_RENDER_CACHE)
    with srv.running():
        assert tile(srv, "a") == expected  # the first load (at start) optimised and wrote it
        (written,) = files(cache)
        assert not list(cache.glob(".part-*"))
        os.utime(written, ns=(0, 0))
        reload(srv, "a")
        assert tile(srv, "a") == expected  # read from the cache: the same pixels
        assert written.stat().st_mtime_ns > 0, "a hit did not touch its file"
        assert tile(srv, "b") == expected  # a copy under another name: the same file
        assert files(cache) == [written]
        written.write_bytes(b"not an ORT file")
        reload(srv, "a")
        assert tile(srv, "a") == expected  # damaged: optimised and written again
        assert files(cache) == [written] and written.stat().st_size > 1000


def test_the_folder_keeps_within_its_bytes(tmp_path):
    cache = SessionCache(tmp_path, max_bytes=250)
    for i, size in enumerate((100, 100, 100)):
        path = tmp_path / f"{i}.ort"
        path.write_bytes(b"x" * size)
        os.utime(path, ns=(i * 10**9, i * 10**9))
    (tmp_path / ".part-1.ort").write_bytes(b"x" * 1000)  # another process writing: not counted, not deleted
    cache.prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".part-1.ort", "1.ort", "2.ort"]


def test_a_folder_that_cannot_be_written_turns_the_cache_off(photos, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    srv = Server(photos, "--session-cache", str(blocker / "sessions"), *EXPLICIT)
    with srv.running():
        assert tile(srv, "a")
        reload(srv, "a")
        assert tile(srv, "a")
    said = srv.proc.stdout.read()
    assert "session cache off" in said and "INR_SESSION_CACHE" in said, said


@pytest.mark.parametrize("size", ["0", "lots"])
def test_a_bad_size_is_one_line_at_start(photos, size):
    r = run_cli("--models", str(photos), "--session-cache-bytes", size)
    one_line(r, 2, "error: --session-cache-bytes")
