"""The fit worker's folders in a place other users can write (issue 54, hole 2, the worker's side).

The worker kept its S3 model mirror in `$TMPDIR/inr-fit-models` and its temporary files (an upload read back from the
bucket, its tiled copy, a version staged for S3) in TMPDIR, and used an upload it read back without checking it:
another local user who owns TMPDIR, or made `inr-fit-models` / `inr-fit-uploads` there first, could plant a model's
policy or swap the image a job fits; a folder the worker refused was an uncaught traceback. The secure answer
(training/worker/__init__.py, fitstore/uploads.py, modelrepo/private_dir.py):

* the worker's folders are this user's alone by default: the model cache `$XDG_CACHE_HOME/inr-serve/fit-models`
  (`--model-cache`, INR_FIT_MODEL_CACHE), its temporary files `$XDG_CACHE_HOME/inr-serve/fit-uploads` (else under
  `~/.cache`), made 0700; TMPDIR is never used, so the worker writes nothing there;
* a folder (the default or a configured one) that another user owns, that group or others can write, or that is a
  symbolic link stops `python -m training worker` in one line naming the folder and the setting, exit code 2, before
  anything is read or written (the job store is not even opened);
* an upload read back from the bucket is fitted only when its bytes have the sha256 its job's record holds (what the
  API hashed as it received it); otherwise the job fails saying so, and the copy is deleted. The model cache's files
  are checked at each use as the service's are (tests/security/test_cache_folders.py).

Tests run as root here: "another user" is uid 65534 (nobody), given the folders with `os.chown`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fitstore import FitStore, new_id
from tests.fits import FAST, Worker, png, wait_finished
from tests.security.test_cache_folders import snapshot, theirs
from tests.service.test_startup_errors import one_line

ROOT = Path(__file__).resolve().parents[2]


def plant(shared: Path) -> None:
    """The old folders, made first by another user (0777) in their TMPDIR, each holding a planted file."""
    for kind in ("inr-fit-models", "inr-fit-uploads"):
        folder = theirs(shared / kind, 0o777)
        (folder / "planted").write_bytes(png())
        theirs(folder / "planted", 0o666)


def kept(store: FitStore, s3, bucket: str, data: bytes, sha256: str) -> dict:
    """A job as the API queues a large upload: the file put into the bucket, the record naming it with its sha256."""
    job_id = new_id()
    s3.put_object(Bucket=bucket, Key=f"uploads/{job_id}.png", Body=data)
    source = {"filename": "big.png", "width": 48, "height": 40, "mode": "RGB", "format": "PNG", "frames": 1}
    return store.submit(
        name=f"m{job_id}",
        options=FAST,
        image_png=b"",
        source={**source, "sha256": sha256, "upload": f"{job_id}.png", "orientation": 1, "levels": 1},
        deadline_s=300,
        max_running=1,
        queue_limit=4,
        job_id=job_id,
    )


@pytest.fixture(scope="module")
def stack(s3_server, tmp_path_factory):
    """A real worker on a real S3 server (models and uploads in a bucket), TMPDIR a folder of another user's (1777)
    with the old folders planted in it, XDG_CACHE_HOME private."""
    root = tmp_path_factory.mktemp("worker-folders")
    shared = theirs(root / "shared", 0o1777)
    plant(shared)
    before = snapshot(shared)
    bucket = s3_server.bucket()
    url = f"sqlite:///{root / 'fits.sqlite'}"
    env = {**s3_server.env, "TMPDIR": str(shared), "XDG_CACHE_HOME": str(root / "cache"), "INR_FIT_STALE_S": "3"}
    for name in ("INR_FIT_MODEL_CACHE", "INR_FIT_UPLOADS"):
        env.pop(name, None)
    args = ("--uploads", s3_server.url(bucket, "uploads"))
    worker = Worker(url, s3_server.url(bucket, "models"), root / "worker.log", *args, env=env)
    store = FitStore(url, stale_s=3)
    try:
        deadline = time.monotonic() + 120  # the worker imports torch, then beats
        while not store.workers() and time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(0.2)
        assert store.workers(), worker.output()[-2000:]
        yield store, s3_server.client(), bucket, shared, before, root / "cache"
    finally:
        store.close()
        worker.stop()


def test_a_tmpdir_another_user_made_is_never_used_by_the_worker(stack):
    """TMPDIR is another user's (1777), holding `inr-fit-models` and `inr-fit-uploads` made first by them (0777) with
    files planted. The worker, models and uploads on S3, every folder setting at its default, fits a large upload
    read back from the bucket and publishes it, and writes nothing in TMPDIR: its model cache and its temporary files
    are in its private folders (0700) under XDG_CACHE_HOME."""
    store, s3, bucket, shared, before, cache = stack
    data = png()
    done = wait_finished(store, kept(store, s3, bucket, data, hashlib.sha256(data).hexdigest())["id"])
    assert done["state"] == "succeeded", done
    assert snapshot(shared) == before
    for kind in ("fit-models", "fit-uploads"):
        assert (cache / "inr-serve" / kind).stat().st_mode & 0o777 == 0o700, kind
    assert any((cache / "inr-serve" / "fit-models").iterdir()), "the model cache is the private one"


def test_an_upload_swapped_in_the_bucket_is_never_fitted(stack):
    """The bucket's copy of an upload is not the file the API received (its sha256 is not the record's): the job
    fails saying so, no version is written, and the worker's copy is deleted."""
    store, s3, bucket, shared, before, cache = stack
    data, other = png(), png(fmt="PNG", compress_level=1)
    assert data != other
    rec = kept(store, s3, bucket, other, hashlib.sha256(data).hexdigest())
    done = wait_finished(store, rec["id"])
    assert done["state"] == "failed" and "not the file the API received" in done["error"], done
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"models/{rec['name']}/").get("Contents", [])]
    assert keys == []
    left = [p for p in (cache / "inr-serve" / "fit-uploads").rglob("*") if p.is_file() and p.name != ".ses"]
    assert left == []  # (.ses: onnxruntime's telemetry file, in the worker's TMPDIR, which is this folder)
    assert snapshot(shared) == before


def run_worker(tmp_path: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    """`python -m training worker`, models on an S3 URL nothing answers, its store a file not made yet."""
    base = {k: v for k, v in os.environ.items() if k not in ("INR_FIT_MODEL_CACHE", "XDG_CACHE_HOME")}
    cmd = [sys.executable, "-m", "training", "worker", "--store", f"sqlite:///{tmp_path / 'fits.sqlite'}"]
    return subprocess.run(
        [*cmd, "--models", "s3://127.0.0.1:9/bucket/models", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "XDG_CACHE_HOME": str(tmp_path / "xdg"), **env},
    )


def unsafe(tmp_path: Path, case: str) -> Path:
    """A folder another user could write: theirs (0777, in their TMPDIR), ours but group-writable, a symbolic link to
    ours, or inside a folder of theirs."""
    if case == "group-writable":
        (tmp_path / "mine").mkdir()
        os.chmod(tmp_path / "mine", 0o770)
        return tmp_path / "mine"
    if case == "symlink":
        (tmp_path / "private").mkdir(mode=0o700)
        (tmp_path / "link").symlink_to(tmp_path / "private")
        return tmp_path / "link"
    if case == "inside-theirs":
        return theirs(tmp_path / "their-home", 0o755) / "cache"
    return theirs(tmp_path / "shared" / "inr-fit-models", 0o777)


@pytest.mark.parametrize("case", ["theirs", "group-writable", "symlink", "inside-theirs", "variable", "default"])
def test_a_model_cache_another_user_could_write_stops_the_worker_in_one_line(tmp_path, case):
    """The worker's model cache (--model-cache, INR_FIT_MODEL_CACHE, or its default under XDG_CACHE_HOME) belongs to
    another user, is writable by group or others, is a symbolic link or lies inside another user's folder: the worker
    stops in one line naming the folder and the setting, exit code 2, before anything is read or written."""
    shared = theirs(tmp_path / "shared", 0o1777)
    env, args = {}, ()
    if case == "default":  # in an XDG_CACHE_HOME of another user's
        folder = theirs(shared / "xdg", 0o755) / "inr-serve" / "fit-models"
        env["XDG_CACHE_HOME"] = str(shared / "xdg")
    else:
        folder = unsafe(tmp_path, case)
    if case == "variable":
        env["INR_FIT_MODEL_CACHE"] = str(folder)
    elif case != "default":
        args = ("--model-cache", str(folder))
    before = snapshot(tmp_path)
    r = run_worker(tmp_path, *args, env=env)
    one_line(r, 2, f"error: the cache folder {folder} ")
    assert "--model-cache / INR_FIT_MODEL_CACHE" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before


def test_a_temporary_folder_another_user_made_stops_the_worker_in_one_line(tmp_path):
    """The worker's temporary folder (`fit-uploads` under XDG_CACHE_HOME) was made first by another user (0777): the
    worker stops in one line naming it and XDG_CACHE_HOME, exit code 2, before anything is read or written."""
    folder = tmp_path / "xdg" / "inr-serve" / "fit-uploads"
    folder.parent.mkdir(parents=True, mode=0o700)
    theirs(folder, 0o777)
    before = snapshot(tmp_path)
    r = run_worker(tmp_path, "--model-cache", str(tmp_path / "models-cache"), env={})
    one_line(r, 2, f"error: the cache folder {folder} belongs to uid 65534")
    assert "XDG_CACHE_HOME" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before
