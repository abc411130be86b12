"""Uploads kept as files (docs/fits.md, "Giant images"): an image too large to carry in the store (over
INR_MAX_UPLOAD_PIXELS, up to INR_FIT_MAX_UPLOAD_PIXELS) is streamed by the API into the uploads folder
(INR_FIT_UPLOADS), which the workers share as they share the model repository, and its job's record names it:
`source.upload`, `JOB.EXT`. A worker reads it a region at a time (bigimage).

The file goes when its job no longer needs it: once the job is split into blocks (each block carries its own
pixels in the store), or has ended. The worker that splits or ends a job deletes it (`release`); `sweep` deletes
any file whose job has ended or does not exist, once it is older than GRACE_S (a file being streamed in, or
named a moment before its job is inserted, is younger).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

from .store import FINISHED

DEFAULT = "build/uploads"
GRACE_S = 3600.0
PART = ".part-"  # a file still being streamed in: `.part-RANDOM`
NAME = re.compile(r"^([0-9a-f]{12})\.(jpg|png|tif)$")
EXTENSIONS = {"jpeg": "jpg", "png": "png", "tiff": "tif"}

log = logging.getLogger(__name__)


def file_name(job_id: str, fmt: str) -> str:
    """The upload's name in the folder: the job's id and the extension of its format (bigimage.FORMATS)."""
    return f"{job_id}.{EXTENSIONS[fmt]}"


def path_of(folder: str | os.PathLike, source: dict) -> Path | None:
    """The job's upload file, when its record names one (None: the pixels are in the store)."""
    name = source.get("upload")
    if not name:
        return None
    if not NAME.match(name):  # a record is data: never a path out of the folder
        raise ValueError(f"the record's upload name {name[:40]!r} is not JOB.EXT")
    return Path(folder) / name


def release(folder: str | os.PathLike, source: dict) -> None:
    """Delete the job's upload file, if it has one and it is still there."""
    path = path_of(folder, source)
    if path is not None:
        path.unlink(missing_ok=True)


def sweep(store, folder: str | os.PathLike, grace_s: float = GRACE_S, now: float | None = None) -> list[str]:
    """Delete the files of the folder that no job needs: older than `grace_s` and whose job has ended, has been
    split into blocks, or is unknown (a part left by an upload that never finished included). The names deleted."""
    folder, now = Path(folder), time.time() if now is None else now
    gone = []
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
