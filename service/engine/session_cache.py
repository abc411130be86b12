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

from .modelfile import new_session

log = logging.getLogger(__name__)
SUFFIX = ".ort"
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

    def path(self, onnx_sha256: str, providers: list[str]) -> Path:
        key = hashlib.sha256(f"{onnx_sha256}|{','.join(providers)}|{self._machine}".encode()).hexdigest()
        return self.folder / f"{key[:32]}{SUFFIX}"

    def session(self, onnx_path: Path, onnx_sha256: str, providers: list[str], make_options: Callable[[], Options]):
        """A session of `onnx_path`, from the cache when it holds the optimised graph, else optimised now and its
        result written to the cache. Errors of the ONNX file itself propagate, as from a plain session."""
        cached = self.path(onnx_sha256, providers)
        if cached.is_file():
            try:
                session = _read(cached, make_options(), providers)
                os.utime(cached)  # least recently used goes first
                return session
            except Exception as e:  # a damaged or foreign file: optimise again
                log.warning("session cache: %s unreadable (%s); optimising the model again", cached.name, e)
                cached.unlink(missing_ok=True)
        options = make_options()
        if not self._ready():
            return new_session(onnx_path, options, providers)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=SUFFIX)
        os.close(fd)
        try:
            options.optimized_model_filepath = tmp
            options.add_session_config_entry("session.save_model_format", "ORT")
            session = new_session(onnx_path, options, providers)
            os.replace(tmp, cached)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self.prune()
        return session

    def _ready(self) -> bool:
        if self.usable:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                if not os.access(self.folder, os.W_OK):
                    raise PermissionError(f"{self.folder} is not writable")
            except OSError as e:
                log.warning("session cache off: %s (INR_SESSION_CACHE)", e)
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
                Path(path).unlink(missing_ok=True)
                total -= size


def _read(path: Path, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done before it was saved
    options.add_session_config_entry("session.load_model_format", "ORT")
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)
