"""Open a repository by where it is (modelrepo/location.py): a folder, or an s3:// URL."""

from __future__ import annotations

import os
from pathlib import Path

from .location import is_s3
from .repository import LocalRepository, Repository, Target
from .s3 import S3Repository


def open_repository(where: str | os.PathLike, cache: str | os.PathLike | None = None, **options) -> Repository:
    """The repository at `where` (a folder, or an s3:// URL, modelrepo/location.py); `cache` is the S3 mirror's
    folder (a temporary one when None)."""
    if is_s3(where):
        return S3Repository(str(where), cache, **options)
    return LocalRepository(where)


def open_target(out: str | os.PathLike | Target) -> Target:
    """`--out`'s model: `models/NAME` or `s3://…/NAME` (its last part is the name)."""
    if isinstance(out, Target):
        return out
    text = os.fspath(out)
    if text.startswith("s3://"):
        parent, _, name = text.rstrip("/").rpartition("/")
        return open_repository(parent).target(name)
    path = Path(text)
    return LocalRepository(path.parent).target(path.name)
