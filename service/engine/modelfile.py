"""What onnxruntime is given for a version's ONNX file: its path, or, for a file with entropy-coded tables
(modelrepo/tablecode.py), the graph with those tables decoded by numpy (modelrepo/onnxfile.py), so that the session
never runs the decoding nodes the file carries for other runtimes (Triton, a plain onnxruntime), which decode the
same tables several times slower at load."""

from __future__ import annotations

from pathlib import Path

from modelrepo.onnxfile import decoded, has_coded_tables
from modelrepo.tablecode import CodeError

from ..errors import ModelLoadError


def model_source(onnx_path: Path) -> str | bytes:
    """The path of a file without coded tables (onnxruntime reads it itself), else the decoded file's bytes.
    ModelLoadError for coded tables that do not decode."""
    data = Path(onnx_path).read_bytes()
    if not has_coded_tables(data):
        return str(onnx_path)
    try:
        return decoded(data)
    except CodeError as e:
        raise ModelLoadError(f"{Path(onnx_path).name}: {e}") from None
