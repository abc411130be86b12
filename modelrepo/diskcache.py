"""The S3 mirror on local disk under a byte budget (INR_MODEL_CACHE_BYTES), counted as `du` counts it: every file's
and folder's blocks. A version's large files (model.onnx, body.onnx, blocks, preview.png) go least recently used
first; each model's small files (config.pbtxt, metadata.json, the ETags) and its folders stay, counted: a model's
listing and policy need them, and they are a few KB a model.

A file is used when a load fetches it (`touch`); room is made before a download (`make_room`). A file used in the
last RECENT_S seconds is never deleted for room (a load may be about to open it): then the cache goes over its
budget for a moment, says so in the log, and is trimmed back once those seconds are over. A cache over its budget
at a start (a smaller budget than the last run's) is trimmed at once. A file larger than the whole budget is never
downloaded (CacheTooSmall).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)
RECENT_S = 5.0  # a load opens its file within milliseconds of the fetch: this covers it on a busy machine
SMALL = ("metadata.json",)
BLOCK = 4096  # a new file's size rounded up to the blocks it will take, before it is written


class CacheTooSmall(Exception):
    """A file larger than the whole disk cache (INR_MODEL_CACHE_BYTES): it cannot be kept, so it is not fetched."""


def is_large(rel: str) -> bool:
    """A version's file other than its metadata.json (`N/model.onnx`, `N/blocks/r0c0.onnx`, `N/preview.png`)."""
    first, _, rest = rel.partition("/")
    return first.isdigit() and bool(rest) and rest not in SMALL


def blocks(path: Path) -> int:
    """The bytes `du` counts for one file or folder (0 when it is gone)."""
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


def on_disk(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class DiskBudget:
    def __init__(self, root: Path, max_bytes: int, forget: Callable[[Path], None], extra: tuple[Path, ...] = ()):
        self.root, self.max_bytes, self.forget = root, max_bytes, forget
        self.extra = extra  # files of the cache's own beside the models (its key), counted
        self.files: OrderedDict[Path, tuple[int, float]] = OrderedDict()  # path → (bytes, last use), oldest first
        self.kept: dict[str, int] = {}  # model folder → bytes of its small files and folders
        self.lock = threading.Lock()
        self._trim: threading.Timer | None = None
        self._walk()
        self.make_room(0)

    def _walk(self) -> None:
        """What a previous run left in the mirror (its files kept across a restart), by their times of use."""
        found = []
        for folder in (p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            self.note(folder)
            for path in folder.rglob("*"):
                rel = path.relative_to(folder).as_posix()
                if path.name.startswith(".") or not is_large(rel) or not path.is_file():
                    continue
                try:
                    st = path.stat()
                except OSError:
                    continue
                found.append((st.st_mtime, path, st.st_blocks * 512))
        for mtime, path, size in sorted(found):
            self.files[path] = (size, mtime)

    def note(self, folder: Path) -> None:
        """Count a model folder's small files and folders again (after they were fetched or removed)."""
        total = 0
        for dirpath, dirs, names in os.walk(folder):
            total += blocks(Path(dirpath))
            for n in names:
                rel = Path(dirpath, n).relative_to(folder).as_posix()
                if not n.startswith(".part-") and not is_large(rel):
                    total += blocks(Path(dirpath, n))
        with self.lock:
            self.kept[folder.name] = total

    @property
    def bytes(self) -> int:
        """The cache's bytes on disk: its folders, every model's small files and the version files it holds."""
        with self.lock:
            return self._total()

    def _total(self) -> int:
        folders = blocks(self.root) + blocks(self.root.parent) + sum(blocks(p) for p in self.extra)
        return folders + sum(self.kept.values()) + sum(size for size, _ in self.files.values())

    def touch(self, path: Path) -> None:
        now = time.time()
        with self.lock:
            new = self.files.pop(path, None) is None
            self.files[path] = (blocks(path), now)
            over = new and self._total() > self.max_bytes
        try:
            os.utime(path, (now, now))  # the order survives a restart
        except OSError:
            pass
        if over:  # a download beside this one took the room it made
            self.make_room(0)

    def check(self, what: str, size: int) -> None:
        """CacheTooSmall when a file of `size` bytes alone takes more than the whole budget."""
        if on_disk(size) > self.max_bytes:
            raise CacheTooSmall(
                f"{what} is {size:,} bytes, more than the whole disk cache of models on S3 "
                f"(INR_MODEL_CACHE_BYTES={self.max_bytes:,}): not downloaded"
            )

    def make_room(self, size: int) -> None:
        """Delete least recently used files until `size` more bytes fit, sparing those used in the last RECENT_S
        (then trying again once those seconds are over)."""
        now, gone, spared = time.time(), [], []
        with self.lock:
            need = on_disk(size)
            total = self._total()
            for path, (s, used) in list(self.files.items()):  # least recently used first
                if total + need <= self.max_bytes:
                    break
                if now - used < RECENT_S:
                    spared.append(used)
                    continue
                del self.files[path]
                gone.append(path)
                total -= s
            if total + need > self.max_bytes and spared and self._trim is None:  # when the oldest spared can go
                self._trim = threading.Timer(spared[0] + RECENT_S - now + 0.05, self._trim_later)
                self._trim.daemon = True
                self._trim.start()
        for path in gone:
            path.unlink(missing_ok=True)
            self.forget(path)
        if total + need > self.max_bytes:
            log.warning(
                "model cache: %d bytes on disk with the next file, over INR_MODEL_CACHE_BYTES=%d until %s",
                total + need,
                self.max_bytes,
                f"the files used in the last {RECENT_S:g} s can go"
                if spared
                else "ever: the models' small files and folders alone take more (a larger budget is needed)",
            )

    def _trim_later(self) -> None:
        with self.lock:
            self._trim = None
        self.make_room(0)
