"""What onnxruntime is given for a version's ONNX file: its path, or, for a file with entropy-coded tables
(modelrepo/tablecode.py), the graph with those tables decoded (modelrepo/onnxfile.py; in C where it was built, else
by numpy), so that the session never runs the decoding nodes the file carries for other runtimes (Triton, a plain
onnxruntime), which decode the same tables several times slower at load."""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort

from modelrepo.onnxfile import decoded, decoded_model, has_coded_tables
from modelrepo.tablecode import CodeError

from ..errors import ModelLoadError
from .lattice_graph import read_lattice
from .shared_tables import SharedTables, share

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"


class ModelFile:
    """A version's model.onnx as one load reads it: a file with coded tables is decoded once for its session and its
    lattice (service/engine/lattice.py), where each decoded it for itself (a 4 MP model's first load ~40 ms more).
    A dense grid's CPU session and lattice share one copy of its tables (`tables`, service/engine/shared_tables.py)
    unless `share` is False."""

    def __init__(self, path: Path, share: bool = True):
        self.path = Path(path)
        self.lattice_read = None  # the lattice read from the decoded graph the session was made from (lattice_graph)
        self._share, self._tables, self._read = share, None, False

    def __fspath__(self) -> str:
        return str(self.path)

    def tables(self) -> SharedTables | None:
        """The tables a CPU session and the lattice share, read and packed at the first call; None for a file that
        is not a dense grid of 8-bit or float32 tables. ModelLoadError for coded tables that do not decode."""
        if self._share and not self._read:
            self._read = True
            data = self.path.read_bytes()
            try:
                model = self._model(data)
            except ModelLoadError:
                if has_coded_tables(data):
                    raise
                return None  # not an ONNX file: onnxruntime says what is wrong with it, as for any other
            self.lattice_read = _lattice_read(model)
            if self.lattice_read is not None:
                levels, head = self.lattice_read
                try:
                    self._tables = share(model, levels)
                except Exception as e:  # the plain session serves it
                    log.warning("%s: tables not shared with the lattice: %s", self.path, e)
                if self._tables is not None:
                    self.lattice_read = (list(self._tables.levels), head)
        return self._tables

    def source(self, cpu: bool = False) -> str | bytes:
        """`model_source`, keeping what the lattice reads of the decoded graph; for a CPU session (`cpu`) of a file
        whose tables are shared, the graph that reads them (`tables`)."""
        if cpu and self.tables() is not None:
            return self._tables.graph
        data = self.path.read_bytes()
        if not has_coded_tables(data):
            return str(self.path)
        model = self._model(data)
        if self.lattice_read is None:
            self.lattice_read = _lattice_read(model)
        return model.SerializeToString()

    def _model(self, data: bytes):
        try:
            return decoded_model(data)
        except CodeError as e:
            raise ModelLoadError(f"{self.path.name}: {e}") from None


def _lattice_read(model):
    try:
        return read_lattice(model)
    except Exception:  # the lattice reads the file again, and says why it has none
        return None


def model_source(onnx_path: Path | ModelFile) -> str | bytes:
    """The path of a file without coded tables (onnxruntime reads it itself), else the decoded file's bytes.
    ModelLoadError for coded tables that do not decode."""
    if isinstance(onnx_path, ModelFile):
        return onnx_path.source()
    data = Path(onnx_path).read_bytes()
    if not has_coded_tables(data):
        return str(onnx_path)
    try:
        return decoded(data)
    except CodeError as e:
        raise ModelLoadError(f"{Path(onnx_path).name}: {e}") from None


def new_session(onnx_path: Path | ModelFile, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    """A session of the version's file (`model_source`), on the tables it shares with the lattice where a CPU session
    does (`ModelFile.tables`). onnxruntime's Python session keeps the bytes it was made from, for as long as it lives,
    to make itself again should a run fall back to another provider: a decoded photo model's whole file (5.6 MiB of a
    4 MP model's 45 MiB resident, docs/benchmarks.md, collection). A session on the CPU alone has no provider to fall
    back to, and drops them."""
    cpu = providers == [CPU]
    shared = onnx_path.tables() if cpu and isinstance(onnx_path, ModelFile) else None
    source = onnx_path.source(cpu) if isinstance(onnx_path, ModelFile) else model_source(onnx_path)
    values = shared.add_to(options) if shared is not None else []
    session = ort.InferenceSession(source, sess_options=options, providers=providers)
    if isinstance(source, bytes) and cpu and getattr(session, "_model_bytes", None) is source:
        session._model_bytes = None
    if values:  # onnxruntime reads their buffers for the session's life
        session.shared_tables = (shared, values)
    return session
