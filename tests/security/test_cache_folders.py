"""Caches in folders other users can write (issue 54, hole 2).

The S3 model cache and the session cache were `$TMPDIR/inr-serve-models` and `$TMPDIR/inr-serve-sessions`, made
with `mkdir(exist_ok=True)` under names anyone can compute in a folder everyone can write, and a file there was
trusted because it existed: another local user who made the folders first could make a restricted model public (a
`config.pbtxt` without its `access` line beside a matching `.etags.json`) or change what a model answers (a planted
`.ort` graph). The secure answer (modelrepo/private_dir.py, modelrepo/s3.py, service/engine/session_cache.py):

* the caches live in a private folder of this user's by default (`$XDG_CACHE_HOME/inr-serve/…`, else
  `~/.cache/inr-serve/…`), made 0700; TMPDIR is never used for them;
* a folder (the default or a configured one) that another user owns, that group or others can write, or that is a
  symbolic link, is refused at the start: one line, exit code 2, naming the folder and the setting;
* every cached file is checked when it is used: the S3 mirror's files against the sha256 recorded (in a manifest
  signed with a key only this user can read) when they were downloaded, and a version's graphs also against the
  sha256 its metadata records; a session-cache entry only when its keyed digest, beside it, verifies. A file that
  does not match is downloaded or optimised again, never used.

Tests run as root here: "another user" is uid 65534 (nobody), given the folders with `os.chown`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import httpx
import onnxruntime as ort
import pytest

from modelrepo import read_version
from modelrepo.s3 import S3Repository
from service.engine.session_cache import SessionCache
from tests.modelrepo.test_push import push
from tests.servers import Server
from tests.service.engine.test_residency import copy_model
from tests.service.test_startup_errors import one_line, run_cli

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
CPU = ["CPUExecutionProvider"]
RESTRICTED = 'parameters { key: "access" value { string_value: "restricted" } }\n'
COORDS = {"coords": [[x / 7, y / 7] for x in range(8) for y in range(8)]}
TILE = "/iiif/3/photo/0,0,512,512/128,/0/default.png"
QUIET = {"INR_RENDER_CACHE_BYTES": "0"}  # every tile rendered
EXPLICIT = ("--model-control-mode", "explicit", "--load-model", "*")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """`photo` (public) and `secret` (restricted): copies of the bundled Fourier-feature image, whose CPU session
    goes through the session cache."""
    repo = tmp_path_factory.mktemp("photos")
    for name in ("photo", "secret"):
        copy_model(ROOT / "models" / "astronaut", repo / name)
    with (repo / "secret" / "config.pbtxt").open("a") as f:
        f.write(RESTRICTED)
    return repo


@pytest.fixture(scope="module")
def expected(photos) -> dict:
    """What `photo` answers from a server with no session cache and its models in a folder."""
    srv = Server(photos, "--session-cache", "off", env=QUIET)
    with srv.running():
        return answers(srv)


@pytest.fixture
def no_cache_settings(monkeypatch):
    for name in ("INR_SESSION_CACHE", "INR_MODEL_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def answers(srv: Server) -> dict:
    q = httpx.post(f"{srv.url}/v1/models/photo/query", json=COORDS, timeout=60)
    tile = httpx.get(srv.url + TILE, timeout=60)
    assert q.status_code == 200 and tile.status_code == 200, (q.text, tile.text)
    return {"query": q.json(), "tile": tile.content}


def theirs(path: Path, mode: int) -> Path:
    """`path` (a folder when it does not exist) made another user's, with `mode`."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    if not path.exists():
        path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)
    return path


def planted_graph(out: Path) -> Path:
    """A valid optimised graph of another model (the dandelion) at `out`: what an attacker plants."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(out)
    options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(ROOT / "models" / "dandelion" / "1" / "model.onnx"), options, providers=CPU)
    return out


def session_entry(folder: Path, model: Path) -> Path:
    """The session cache's file for the version 1 of `model`, as anyone can compute it."""
    sha = hashlib.sha256((model / "1" / "model.onnx").read_bytes()).hexdigest()
    return SessionCache(folder, 1).path(sha, CPU)


def snapshot(folder: Path) -> dict:
    """Every path under `folder` with its type, mode, owner, size and times: equal before and after = untouched."""
    seen = {}
    for dirpath, dirs, names in os.walk(folder):
        for p in (Path(dirpath), *(Path(dirpath, n) for n in names)):
            st = os.lstat(p)
            seen[p.relative_to(folder).as_posix()] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
    return seen


def test_a_tmpdir_another_user_made_is_never_used_and_the_pixels_are_the_same(
    photos, expected, s3_env, tmp_path, no_cache_settings
):
    """TMPDIR is a folder of another user's (1777) holding the old cache folders (0777, theirs), with a public
    `config.pbtxt` planted for the restricted model and an optimised graph of another model under the photo's
    session-cache name. The service (models on S3, every cache setting at its default) writes nothing there, keeps the
    restricted model closed and serves the same pixels, from its private caches (0700) under XDG_CACHE_HOME."""
    url = s3_env.url(s3_env.bucket())
    pushed = push(s3_env, str(photos), url)
    assert pushed.returncode == 0, pushed.stderr
    shared = theirs(tmp_path / "shared", 0o1777)
    models, sessions = theirs(shared / "inr-serve-models", 0o777), theirs(shared / "inr-serve-sessions", 0o777)
    mirror = models / f"s3-{hashlib.sha256(url.encode()).hexdigest()[:12]}" / "secret"
    mirror.mkdir(parents=True)
    bucket, prefix = url.split("/", 4)[3:]
    etag = s3_env.client().head_object(Bucket=bucket, Key=f"{prefix}/secret/config.pbtxt")["ETag"].strip('"')
    (mirror / "config.pbtxt").write_text((photos / "photo" / "config.pbtxt").read_text().replace("photo", "secret"))
    (mirror / ".etags.json").write_text(json.dumps({"config.pbtxt": etag}))
    planted_graph(session_entry(sessions, photos / "photo"))
    for dirpath, dirs, names in os.walk(models):
        for p in (Path(dirpath), *(Path(dirpath, n) for n in names)):
            theirs(p, 0o777 if p.is_dir() else 0o666)
    theirs(session_entry(sessions, photos / "photo"), 0o666)
    before = snapshot(shared)
    xdg = tmp_path / "home-cache"
    srv = Server(url, *EXPLICIT, env={**QUIET, "TMPDIR": str(shared), "XDG_CACHE_HOME": str(xdg)})
    with srv.running():
        assert answers(srv) == expected
        r = httpx.post(f"{srv.url}/v1/models/secret/query", json=COORDS, timeout=60)
        assert r.status_code == 401, r.text
    after = snapshot(shared)
    # `import onnxruntime` writes its telemetry session file TMPDIR/.ses (its 1DS SDK, not the service): set aside
    assert {k: v for k, v in after.items() if k not in (".", ".ses")} == {k: v for k, v in before.items() if k != "."}
    for kind in ("models", "sessions"):
        assert (xdg / "inr-serve" / kind).stat().st_mode & 0o777 == 0o700, kind


@pytest.fixture
def taken():
    """A port held here: a service that got past its settings would exit 3 at once, not run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield str(s.getsockname()[1])


@pytest.mark.parametrize("case", ["theirs", "group-writable", "symlink", "inside-theirs", "default-theirs"])
@pytest.mark.parametrize("setting", ["--session-cache", "--model-cache"])
def test_a_cache_folder_another_user_could_write_refuses_the_start_in_one_line(
    photos, tmp_path, taken, no_cache_settings, case, setting
):
    """A cache folder (configured, or the default under XDG_CACHE_HOME) that belongs to another user, that group or
    others can write, that is a symbolic link, or that lies inside another user's folder: the service refuses to
    start, one line naming the folder and the setting, exit code 2; nothing is made in it."""
    env = {}
    shared = theirs(tmp_path / "shared", 0o1777)
    if case == "theirs":
        folder = theirs(shared / "cache", 0o777)
    elif case == "group-writable":
        folder = tmp_path / "mine"
        folder.mkdir(mode=0o770)
        os.chmod(folder, 0o770)
    elif case == "symlink":
        (tmp_path / "private").mkdir(mode=0o700)
        folder = tmp_path / "link"
        folder.symlink_to(tmp_path / "private")
    elif case == "inside-theirs":
        folder = theirs(tmp_path / "their-home", 0o755) / "cache"
    else:  # the default folder, in an XDG_CACHE_HOME of another user's
        folder = theirs(shared / "xdg", 0o755) / "inr-serve" / {"--session-cache": "sessions"}.get(setting, "models")
        env["XDG_CACHE_HOME"] = str(shared / "xdg")
    before = snapshot(tmp_path)
    args = (setting, str(folder))
    if case == "default-theirs":  # the model cache's default, checked first, set aside when the session cache's is
        args = ("--model-cache", str(tmp_path / "private")) if setting == "--session-cache" else ()
    r = run_cli("--models", str(photos), "--port", taken, "--grpc-port", "0", *args, env=env)
    one_line(r, 2, f"error: {setting}: the cache folder {folder} ")
    assert f"INR_{setting[2:].replace('-', '_').upper()}" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before


def test_a_graph_altered_in_a_private_session_cache_is_never_read(photos, expected, tmp_path):
    """The session cache is private, but its entry was changed (another model's optimised graph written over it, or
    an entry without its keyed digest): the load does not read it, optimises the model again, and the answers stay
    the same."""
    cache = tmp_path / "sessions"
    srv = Server(photos, "--session-cache", str(cache), *EXPLICIT, env=QUIET)
    with srv.running():
        assert answers(srv) == expected
        entry = session_entry(cache, photos / "photo")
        assert entry.is_file()
        planted = planted_graph(tmp_path / "planted.ort").read_bytes()
        for plant in ("over", "unsigned"):
            entry.write_bytes(planted)
            if plant == "unsigned":
                entry.with_name(entry.name + ".mac").unlink()
            for action in ("unload", "load"):
                r = httpx.post(f"{srv.url}/v2/repository/models/photo/{action}", timeout=60)
                assert r.status_code == 200, r.text
            assert answers(srv) == expected, plant
            assert entry.read_bytes() != planted, plant
    assert cache.stat().st_mode & 0o777 == 0o700


def test_a_policy_or_graph_altered_in_a_private_model_cache_is_never_used(photos, s3_env, tmp_path):
    """The S3 model cache is private, but a file in it was changed after its download: the restricted model's
    `config.pbtxt` without its `access` line, a version's `model.onnx` replaced by another model's. Each is checked
    when it is used (the policy at each request, the graph at each load, and both after a restart) and downloaded
    again; the altered file is never served."""
    url = s3_env.url(s3_env.bucket())
    assert push(s3_env, str(photos), url).returncode == 0
    policy = (photos / "secret" / "config.pbtxt").read_text()
    graph = (photos / "photo" / "1" / "model.onnx").read_bytes()
    sha = read_version(photos / "photo", 1).onnx_sha256
    for restart in (False, True):
        repo = S3Repository(url, tmp_path / "cache")
        folder = repo.folder("secret")
        assert (folder / "config.pbtxt").read_text() == policy
        path = repo.fetch("photo", 1, "model.onnx", sha)
        (folder / "config.pbtxt").write_text(policy.replace(RESTRICTED, ""))
        shutil.copyfile(ROOT / "models" / "dandelion" / "1" / "model.onnx", path)
        if restart:
            repo = S3Repository(url, tmp_path / "cache")
            assert (repo.folder("secret") / "config.pbtxt").read_text() == policy
        repo.sync_file("secret", "config.pbtxt")  # what each request's policy check does
        assert (folder / "config.pbtxt").read_text() == policy, restart
        assert repo.fetch("photo", 1, "model.onnx", sha).read_bytes() == graph, restart
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
