"""The S3 mirror's large files under a byte budget (INR_MODEL_CACHE_BYTES): a version's model.onnx, body.onnx and
blocks, least recently used first out. The small files (config.pbtxt, metadata.json) are not counted: a model's
listing needs them, and they are a few KB.

A file is used when a load fetches it (`touch`); room is made before a download (`make_room`). A file used in the
last RECENT_S seconds is never deleted for room (a load may be about to open it): then the cache goes over its
budget for a moment, and says so in the log.
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


def is_large(rel: str) -> bool:
    """A version's file other than its metadata.json (`N/model.onnx`, `N/blocks/r0c0.onnx`, `N/preview.png`)."""
    first, _, rest = rel.partition("/")
    return first.isdigit() and bool(rest) and rest not in SMALL


class DiskBudget:
    def __init__(self, root: Path, max_bytes: int, forget: Callable[[Path], None]):
        self.root, self.max_bytes, self.forget = root, max_bytes, forget
        self.files: OrderedDict[Path, tuple[int, float]] = OrderedDict()  # path → (size, last use), oldest first
        self.lock = threading.Lock()
        self._walk()

    def _walk(self) -> None:
        """What a previous run left in the mirror (its files kept across a restart), by their times of use."""
        found = []
        for dirpath, dirs, names in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for n in names:
                path = Path(dirpath) / n
                rel = path.relative_to(self.root).as_posix().partition("/")[2]
                if n.startswith(".") or not is_large(rel):
                    continue
                try:
                    st = path.stat()
                except OSError:
                    continue
                found.append((st.st_mtime, path, st.st_size))
        for mtime, path, size in sorted(found):
            self.files[path] = (size, mtime)

    @property
    def bytes(self) -> int:
        with self.lock:
            return sum(size for size, _ in self.files.values())

    def touch(self, path: Path, size: int | None = None) -> None:
        now = time.time()
        with self.lock:
            old = self.files.pop(path, None)
            self.files[path] = (size if size is not None else (old[0] if old else 0), now)
        try:
            os.utime(path, (now, now))  # the order survives a restart
        except OSError:
            pass

    def make_room(self, size: int) -> None:
        """Delete least recently used files until `size` more bytes fit, sparing those used in the last RECENT_S."""
        now, gone = time.time(), []
        with self.lock:
            total = sum(s for s, _ in self.files.values())
            for path, (s, used) in list(self.files.items()):
                if total + size <= self.max_bytes:
                    break
                if now - used < RECENT_S:
                    continue
                del self.files[path]
                gone.append(path)
                total -= s
        for path in gone:
            path.unlink(missing_ok=True)
            self.forget(path)
        if total + size > self.max_bytes:
            log.warning(
                "model cache: %d bytes in use with the next file, over INR_MODEL_CACHE_BYTES=%d until older files go",
                total + size,
                self.max_bytes,
            )
