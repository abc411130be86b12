"""A disk cache of optimised sessions: a model's graph as onnxruntime left it after its optimisations, in ORT
format, so that its next load skips them.

A graph that onnxruntime optimises at load (a float16 or hashed grid folding its tables, a Fourier or SineKAN model)
pays for it at every load, and under a memory budget a model is loaded again each time it comes back after an
eviction, so the cache serves every load after a version's first on this machine. A dense grid photo model's CPU
session skips it: the service packs its corner cells itself (service/engine/shared_tables.py), which left
onnxruntime's folding of them (a 2 MP model: ~95 ms of a ~120 ms session) nothing to do.

A hit also skips the decoding of a file's entropy-coded tables (service/engine/modelfile.py): the cached graph
holds them decoded. A file is named by what decides its content: the ONNX file's sha256 (verified by the load
before the cache is asked), onnxruntime's version, the providers and this CPU's instruction-set flags (the
optimised graph may hold kernels for them). Copies of one model under many names share one file. Files are written
under a temporary name and renamed in, so a reader never sees half of one; past `max_bytes` the least recently used
go (a hit touches its file). A file onnxruntime cannot read is deleted and the model optimised again.

The folder is private to this user (modelrepo/private_dir.py: 0700, refused when another user could write it), and
an entry is trusted only when this user wrote it: beside each `NAME.ort`, `NAME.ort.mac` holds the keyed digest
(HMAC-SHA256, with the folder's own `.key`, 0600) of its name and content. An entry without it, or whose digest does
not verify (a graph planted in the folder, or left there before it was private), is never read: it is deleted and
the model optimised again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import onnxruntime as ort

from modelrepo import sha256_file
from modelrepo.private_dir import UnsafeFolder, ensure, key, sign, verify

from .modelfile import new_session

log = logging.getLogger(__name__)
SUFFIX = ".ort"
MAC = ".mac"  # beside each entry: its keyed digest
SETTING = "INR_SESSION_CACHE"
Options = ort.SessionOptions


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine


class SessionCache:
    def __init__(self, folder: Path, max_bytes: int):
        self.folder, self.max_bytes = Path(folder), max_bytes
        self._machine = hashlib.sha256(f"{ort.__version__}|{_cpu_flags()}".encode()).hexdigest()
        self._lock = threading.Lock()  # one prune at a time
        self.usable = True
        self._key: bytes | None = None  # the folder's own, read by `_ready`

    def path(self, onnx_sha256: str, providers: list[str]) -> Path:
        key = hashlib.sha256(f"{onnx_sha256}|{','.join(providers)}|{self._machine}".encode()).hexdigest()
        return self.folder / f"{key[:32]}{SUFFIX}"

    def session(self, onnx_path: Path, onnx_sha256: str, providers: list[str], make_options: Callable[[], Options]):
        """A session of `onnx_path`, from the cache when it holds the optimised graph, else optimised now and its
        result written to the cache. Errors of the ONNX file itself propagate, as from a plain session."""
        cached = self.path(onnx_sha256, providers)
        options = make_options()
        if not self._ready():
            return new_session(onnx_path, options, providers)
        if cached.is_file():
            try:
                if not self._signed(cached):
                    raise ValueError("not written by this user: its keyed digest does not verify")
                session = _read(cached, options, providers)
                os.utime(cached)  # least recently used goes first
                return session
            except Exception as e:  # a damaged or foreign file: optimise again
                log.warning("session cache: %s unreadable (%s); optimising the model again", cached.name, e)
                _remove(Path(cached))
            options = make_options()
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=SUFFIX)
        os.close(fd)
        try:
            options.optimized_model_filepath = tmp
            options.add_session_config_entry("session.save_model_format", "ORT")
            session = new_session(onnx_path, options, providers)
            self._sign(Path(tmp), cached)
            os.replace(tmp, cached)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self.prune()
        return session

    def _signed(self, path: Path) -> bool:
        """Whether `path` is as this user wrote it: its keyed digest, beside it, verifies."""
        try:
            mac = path.with_name(path.name + MAC).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return False
        return verify(self._key, mac, path.name, sha256_file(path))

    def _sign(self, tmp: Path, cached: Path) -> None:
        """Write the keyed digest of `tmp`'s content under `cached`'s name beside it (before the entry is renamed
        in: a reader never finds the entry without it)."""
        fd, part = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=MAC)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(sign(self._key, cached.name, sha256_file(tmp)))
        os.replace(part, cached.with_name(cached.name + MAC))

    def _ready(self) -> bool:
        """The folder made private and its key read, once; a folder that cannot be turns the cache off."""
        if self.usable and self._key is None:
            try:
                ensure(self.folder, SETTING)
                if not os.access(self.folder, os.W_OK):
                    raise PermissionError(f"{self.folder} is not writable")
                self._key = key(self.folder, SETTING)
            except (OSError, UnsafeFolder) as e:
                log.warning("session cache off: %s (%s)", e, SETTING)
                self.usable = False
        return self.usable

    def prune(self) -> None:
        """Delete the least recently used files until the rest fit `max_bytes`."""
        with self._lock:
            files = []
            for entry in os.scandir(self.folder):
                try:
                    if entry.name.endswith(SUFFIX) and not entry.name.startswith(".part-"):
                        st = entry.stat()
                        files.append((st.st_mtime_ns, st.st_size, entry.path))
                except OSError:
                    continue  # deleted meanwhile by another process
            total = sum(size for _, size, _ in files)
            for _, size, path in sorted(files):
                if total <= self.max_bytes:
                    break
                _remove(Path(path))
                total -= size


def _remove(path: Path) -> None:
    """An entry and its keyed digest."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + MAC).unlink(missing_ok=True)


def _read(path: Path, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done before it was saved
    options.add_session_config_entry("session.load_model_format", "ORT")
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)
