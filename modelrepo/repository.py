"""One interface to a model repository, in a local folder or on S3 (modelrepo/s3.py), for the service and training.

The service reads model folders from `root`, a local folder in the repository's layout: for a local repository the
repository itself, for S3 a mirror in the disk cache (INR_MODEL_CACHE) that holds each model's small files
(config.pbtxt, metadata.json, each published version's metadata.json) once the model is read, and a version's
large files (model.onnx, body.onnx, blocks/*.onnx) once a load needs them (`fetch`). So everything that reads a
model folder (the spec, the versions, the access policy, warmups, block layouts) is the same code on both.

    scan()            name → local folder of every model there (S3: paged listings, no model file read)
    folder(name)      the model's local folder with its small files current (S3: those whose ETag changed fetched)
    path(name)        where that folder is, without looking (the access policy's stat on each request)
    sync_file(n, f)   one small file of the model current (the access policy's config.pbtxt)
    stamp(name)       what changes when any file of the model changes (a rescan compares it)
    version_stamp     the same for one version's files, in ModelRuntime.files_stamp's shape
    fetch(...)        a version's file on local disk, checked against its sha256 (S3: pulled on first use)
    write_version     the next version, visible all at once (local: a rename; S3: a marker object written last)
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .spec import NAME_RE, ModelSpec, SpecError

SETTLED_NS = 2 * 10**9  # a folder's mtime this old is trusted to show every change (filesystems with coarse times)


class StorageUnavailable(Exception):
    """The repository's storage did not answer (S3 stopped, the network down): try again later. Not a fault of the
    model: a version is never marked failed for it, and what is on local disk keeps serving."""


@dataclass(frozen=True)
class Target:
    """A model of a repository that training writes to (`--out models/NAME` or `--out s3://…/NAME`)."""

    repository: "Repository"
    name: str

    def __str__(self) -> str:
        return f"{self.repository.url}/{self.name}"

    def task(self) -> str | None:
        return self.repository.task_of(self.name)

    def write_version(self, spec: ModelSpec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None):
        return self.repository.write_version(self.name, spec, onnx_bytes, metadata, extras, guard)


class Repository:
    """The interface; `LocalRepository` and `modelrepo.s3.S3Repository` implement it."""

    url: str
    root: Path
    remote = False

    def scan(self) -> dict[str, Path]:
        raise NotImplementedError

    def folder(self, name: str) -> Path | None:
        raise NotImplementedError

    def path(self, name: str) -> Path:
        """Where model `name`'s folder is on local disk, whether or not there is one (no I/O)."""
        return self.root / name

    def sync_file(self, name: str, rel: str) -> None:
        """Make `root/name/rel` current (a no-op on a local folder)."""

    def stamp(self, name: str) -> tuple:
        raise NotImplementedError

    @contextmanager
    def changes(self) -> Iterator[Callable[[str, tuple, bool], bool]]:
        """`changed(name, stamp, whole)`: whether the model differs from `stamp`; `whole` for a model in memory."""
        yield lambda name, stamp, whole: self.stamp(name) != stamp

    def version_stamp(self, name: str, version: int) -> tuple | None:
        """None: the runtime stats its files itself (a local folder)."""
        return None

    def fetch(self, name: str, version: int, rel: str, sha256: str | None = None) -> Path:
        return self.root / name / str(version) / rel

    def task_of(self, name: str) -> str | None:
        raise NotImplementedError

    def write_version(self, name: str, spec: ModelSpec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None):
        """The next version of model `name`, visible all at once, keeping the model's own config.pbtxt and checking
        a fit's `guard` (modelrepo.access.Guard) against its policy (modelrepo.folder.next_spec_files)."""
        raise NotImplementedError

    def target(self, name: str) -> Target:
        if not NAME_RE.match(name):
            raise SpecError(f"model name '{name[:80]}' must be letters, digits, '_', '-' or '.' (at most 64)")
        return Target(self, name)

    def sweep(self, grace_s: float) -> list[str]:
        """Remove what dead writers left (nothing to do on a local folder: they write hidden folders)."""
        return []


class LocalRepository(Repository):
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = str(self.root)
        self._scanned: tuple[int, dict[str, Path]] | None = None  # (the root's mtime, its folders) at the last scan

    def scan(self) -> dict[str, Path]:
        """The model folders now, name → path: one scandir, or nothing when the root's mtime is unchanged."""
        try:
            stamp = os.stat(self.root).st_mtime_ns
            if self._scanned is not None and self._scanned[0] == stamp and time.time_ns() - stamp > SETTLED_NS:
                return dict(self._scanned[1])  # no folder added, removed or renamed since the last scan
            with os.scandir(self.root) as entries:  # the entries' types come with the listing: no stat each
                found = sorted(e.name for e in entries if e.is_dir() and NAME_RE.match(e.name))
        except OSError:  # not a directory (unmounted for a moment?)
            return {}
        folders = {name: self.root / name for name in found}
        self._scanned = (stamp, folders)
        return dict(folders)

    def folder(self, name: str) -> Path | None:
        path = self.root / name
        return path if NAME_RE.match(name) and path.is_dir() else None

    def stamp(self, name: str) -> tuple:
        return folder_stamp(self.root / name)

    @contextmanager
    def changes(self):
        root = os.open(self.root, os.O_RDONLY)
        try:
            yield (
                lambda name, stamp, whole: (
                    folder_stamp(self.root / name) != stamp if whole else not folder_unchanged(name, stamp, root)
                )
            )
        finally:
            os.close(root)

    def task_of(self, name: str) -> str | None:
        import json

        try:
            return json.loads((self.root / name / "metadata.json").read_text()).get("task")
        except FileNotFoundError:
            return None

    def write_version(self, name: str, spec: ModelSpec, onnx_bytes: bytes, metadata: dict, extras=None, guard=None):
        from .folder import write_version

        return write_version(self.root / name, spec, onnx_bytes, metadata, extras, guard)


def config_stamp(config: str | Path, dir_fd: int | None = None) -> tuple:
    """(mtime_ns, size, inode) of a config.pbtxt, or () without one: an edit in place shows here, a file renamed over
    it too. The model's policy is in it (docs/access.md), so the rescan looks at it as well as at the folder."""
    try:
        st = os.stat(config, dir_fd=dir_fd)
    except OSError:
        return ()
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def folder_stamp(folder: Path) -> tuple:
    """(mtime_ns) of the model folder, its config.pbtxt's stamp, and the mtime of each version folder in it: what
    changes when a version or a config is written the way the training export and Triton's tools write them (a new
    file renamed into place), or a config edited in place. Three stats or so per model, for the rescan of a large
    repository; an edit in place of another file shows only in the full fingerprint (service/engine/control.py),
    which a resident model gets."""
    try:
        found = [os.stat(folder).st_mtime_ns, config_stamp(Path(folder) / "config.pbtxt")]
        with os.scandir(folder) as entries:
            found += sorted((e.name, e.stat().st_mtime_ns) for e in entries if e.name.isdigit() and e.is_dir())
    except OSError:
        return ()
    return tuple(found)


def folder_unchanged(name: str, stamp: tuple, root_fd: int) -> bool:
    """Whether the model folder `name` (in the repository opened as `root_fd`) still has the mtime and the
    config.pbtxt of `stamp` (folder_stamp when it was read): two stats, for a model with no version in memory. A
    version or config renamed into place shows in the folder's mtime, a config edited in place in its own; a version
    rewritten inside its folder is read again at its load (ModelRuntime._load reads the metadata and checks the
    files). That keeps a rescan of 10,000 read models at two stats each."""
    try:
        return (
            bool(stamp)
            and os.stat(name, dir_fd=root_fd).st_mtime_ns == stamp[0]
            and config_stamp(f"{name}/config.pbtxt", root_fd) == stamp[1]
        )
    except OSError:
        return False
