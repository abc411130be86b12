"""What onnxruntime is given for a version's ONNX file: its path, or, for a file with entropy-coded tables
(modelrepo/tablecode.py), the graph with those tables decoded (modelrepo/onnxfile.py; in C where it was built, else
by numpy), so that the session never runs the decoding nodes the file carries for other runtimes (Triton, a plain
onnxruntime), which decode the same tables several times slower at load."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from modelrepo.onnxfile import decoded, decoded_model, has_coded_tables
from modelrepo.tablecode import CodeError

from ..errors import ModelLoadError
from .lattice_graph import read_lattice

CPU = "CPUExecutionProvider"


class ModelFile:
    """A version's model.onnx as one load reads it: a file with coded tables is decoded once for its session and its
    lattice (service/engine/lattice.py), where each decoded it for itself (a 4 MP model's first load ~40 ms more)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lattice_read = None  # the lattice read from the decoded graph the session was made from (lattice_graph)

    def __fspath__(self) -> str:
        return str(self.path)

    def source(self) -> str | bytes:
        """`model_source`, keeping what the lattice reads of the decoded graph."""
        data = self.path.read_bytes()
        if not has_coded_tables(data):
            return str(self.path)
        try:
            model = decoded_model(data)
        except CodeError as e:
            raise ModelLoadError(f"{self.path.name}: {e}") from None
        try:
            self.lattice_read = read_lattice(model)
        except Exception:  # the lattice reads the file again, and says why it has none
            self.lattice_read = None
        return model.SerializeToString()


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


def new_session(onnx_path: Path, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    """A session of the version's file (`model_source`). onnxruntime's Python session keeps the bytes it was made
    from, for as long as it lives, to make itself again should a run fall back to another provider: a decoded photo
    model's whole file (5.6 MiB of a 4 MP model's 45 MiB resident, docs/benchmarks.md, collection). A session on the
    CPU alone has no provider to fall back to, and drops them."""
    source = model_source(onnx_path)
    session = ort.InferenceSession(source, sess_options=options, providers=providers)
    if isinstance(source, bytes) and providers == [CPU] and getattr(session, "_model_bytes", None) is source:
        session._model_bytes = None
    return session
