"""Uploads kept as files (docs/fits.md, "Giant images"): an image too large to carry in the store (over
INR_MAX_UPLOAD_PIXELS, up to INR_FIT_MAX_UPLOAD_PIXELS) is streamed by the API into the uploads folder
(INR_FIT_UPLOADS), which the workers share as they share the model repository, and its job's record names it:
`source.upload`, `JOB.EXT`. A worker reads it a region at a time (bigimage).

INR_FIT_UPLOADS may instead be a bucket, `s3://…` (fitstore/s3uploads.py): the API streams the upload to its own
scratch folder (`scratch`), then puts it into the bucket; the worker reads it back into its temporary folder. Then
the API and the workers share no folder. That scratch folder, and the worker's temporary folder, is this user's
own, private: SCRATCH under the user's cache folder (`$XDG_CACHE_HOME/inr-serve/fit-uploads`, else
`~/.cache/inr-serve/fit-uploads`, made 0700 and checked by the caller with modelrepo/private_dir.py, which this
package may not import), never a name in TMPDIR, where another local user could make the folder first and read or
swap an upload. The worker uses a kept upload only when its bytes have the sha256 its job's record holds (`fetch`).

The file goes when its job no longer needs it: once the job is split into blocks (each block carries its own
pixels in the store), or has ended. The worker that splits or ends a job deletes it (`release`); `sweep` deletes
any file whose job has ended or does not exist, once it is older than GRACE_S (a file being streamed in, or
named a moment before its job is inserted, is younger).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from pathlib import Path

from .s3uploads import S3Uploads, UploadsUnavailable, is_s3  # noqa: F401 - UploadsUnavailable: the API's
from .store import FINISHED

DEFAULT = "build/uploads"
GRACE_S = 3600.0
PART = ".part-"  # a file still being streamed in: `.part-RANDOM`
NAME = re.compile(r"^([0-9a-f]{12})\.(jpg|png|tif)\Z")
EXTENSIONS = {"jpeg": "jpg", "png": "png", "tiff": "tif"}
SCRATCH = "fit-uploads"  # the private scratch folder's kind (modelrepo.private_dir.default_cache)
SCRATCH_SETTING = "XDG_CACHE_HOME"  # what moves it

log = logging.getLogger(__name__)


def file_name(job_id: str, fmt: str) -> str:
    """The upload's name in the folder: the job's id and the extension of its format (bigimage.FORMATS)."""
    return f"{job_id}.{EXTENSIONS[fmt]}"


class UploadMismatch(ValueError):
    """A kept upload whose bytes are not those its job's record holds the sha256 of: never fitted."""


def scratch(where: str | os.PathLike, private: Path | None = None) -> Path:
    """Where the API streams an upload as it arrives: the uploads folder itself, or, for a bucket, `private`, this
    user's private scratch folder (modelrepo.private_dir.ensure(default_cache(SCRATCH), SCRATCH_SETTING)), which a
    bucket needs: never a folder of $TMPDIR, which another local user could have made."""
    if not is_s3(where):
        return Path(where)
    if private is None:
        raise ValueError("an upload for a bucket needs the caller's private scratch folder")
    return Path(private)


def name_of(source: dict) -> str | None:
    """The job's upload name, when its record names one (None: the pixels are in the store)."""
    name = source.get("upload")
    if not name:
        return None
    if not NAME.match(name):  # a record is data: never a path out of the folder
        raise ValueError(f"the record's upload name {name[:40]!r} is not JOB.EXT")
    return name


def path_of(folder: str | os.PathLike, source: dict) -> Path | None:
    """The job's upload file in the uploads folder, when its record names one (None: the pixels are in the store)."""
    name = name_of(source)
    return None if name is None else Path(folder) / name


def keep(where: str | os.PathLike, local: Path, name: str) -> None:
    """The API's last step: the streamed upload at `local` becomes the job's file `name` (renamed in the folder, or
    put into the bucket and deleted here)."""
    if is_s3(where):
        try:
            S3Uploads(str(where)).keep(local, name)
        finally:
            local.unlink(missing_ok=True)
    else:
        local.rename(Path(where) / name)


def fetch(where: str | os.PathLike, source: dict, folder: Path) -> Path | None:
    """The worker's copy of the job's upload: the file in the uploads folder, or read from the bucket into `folder`
    (the worker's private temporary folder). FileNotFoundError when it is not there; UploadMismatch (the copy
    deleted) when its bytes do not have the sha256 the record holds."""
    name = name_of(source)
    if name is None:
        return None
    if is_s3(where):
        path = S3Uploads(str(where)).fetch(name, folder)
    else:
        path = Path(where) / name
        if not path.is_file():
            raise FileNotFoundError(f"the upload {name} is not in the uploads folder {where}")
    check_sha256(path, source, where)
    return path


def check_sha256(path: Path, source: dict, where) -> None:
    """UploadMismatch when `path` does not have the sha256 of the bytes the API received (`source.sha256`)."""
    expected = source.get("sha256")
    if not expected:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        if is_s3(where):
            path.unlink(missing_ok=True)
        raise UploadMismatch(
            f"the upload {path.name} in {where} is not the file the API received (its sha256 is not the record's "
            f"{expected[:12]}…): not fitted"
        )


def release(folder: str | os.PathLike, source: dict) -> None:
    """Delete the job's upload file, if it has one and it is still there."""
    name = name_of(source)
    if name is not None and is_s3(folder):
        try:
            S3Uploads(str(folder)).release(name)
        except UploadsUnavailable as e:  # the sweep deletes it later
            log.warning("uploads: %s", e)
    elif name is not None:
        (Path(folder) / name).unlink(missing_ok=True)


def sweep(store, folder: str | os.PathLike, grace_s: float = GRACE_S, now: float | None = None) -> list[str]:
    """Delete the files of the folder that no job needs: older than `grace_s` and whose job has ended, has been
    split into blocks, or is unknown (a part left by an upload that never finished included). The names deleted."""
    now = time.time() if now is None else now
    if is_s3(folder):
        return _sweep_bucket(store, S3Uploads(str(folder)), grace_s)
    folder, gone = Path(folder), []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return gone
    for entry in entries:
        try:
            if now - entry.stat().st_mtime < grace_s:
                continue
        except FileNotFoundError:
            continue
        found = NAME.match(entry.name)
        if found:
            rec = store.get(found.group(1))
            if rec is not None and rec["state"] not in FINISHED and not rec.get("children"):
                continue
        elif not entry.name.startswith(PART):
            continue  # not ours
        Path(entry.path).unlink(missing_ok=True)
        gone.append(entry.name)
    if gone:
        log.info("uploads: deleted %d files no job needs from %s", len(gone), folder)
    return gone


def _needed(store, name: str) -> bool:
    found = NAME.match(name)
    if not found:
        return False
    rec = store.get(found.group(1))
    return rec is not None and rec["state"] not in FINISHED and not rec.get("children")


def _sweep_bucket(store, bucket: S3Uploads, grace_s: float) -> list[str]:
    """`sweep` for a bucket: the uploads no job needs, older than `grace_s`, and multipart uploads left unfinished."""
    gone = [name for name, age in bucket.objects() if age >= grace_s and not _needed(store, name)]
    for name in gone:
        bucket.release(name)
    aborted = bucket.abort_stale(grace_s)
    if gone or aborted:
        log.info("uploads: deleted %d files no job needs, aborted %d unfinished, in %s", len(gone), aborted, bucket.url)
    return gone
