"""Regenerate `model_config.pb` and `onnx_ml.pb`: Triton's `model_config.proto` and ONNX's `onnx-ml.proto` as
serialized FileDescriptorProtos.

    python -m modelrepo.regen_descriptor     (needs tritonclient, the `dev` extra, and onnx, the `train` extra)

tritonclient ships protoc's output for Triton's published model_config.proto
(tritonclient/grpc/model_config_pb2.py, BSD-3-Clause, NVIDIA; see NOTICE-triton.txt), and onnx for onnx-ml.proto
(onnx/onnx_ml_pb2.py, Apache-2.0, the ONNX Project Contributors; see NOTICE-onnx.txt). The descriptor bytes are
read out of those files' source, not imported (importing them pulls in grpc and the protobuf runtime check), and
written next to this module, so that the serving install parses config.pbtxt, and reads an ONNX file's graph
(modelrepo/onnxfile.py), with protobuf alone.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from google.protobuf import descriptor_pb2

HERE = Path(__file__).resolve().parent


def serialized_descriptor(package: str = "tritonclient", module: str = "grpc/model_config_pb2.py") -> bytes:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"error: {package} is not installed (pip install -e '.[dev,train]')")
    source = Path(list(spec.submodule_search_locations)[0]) / module
    for node in ast.walk(ast.parse(source.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
        ):
            return ast.literal_eval(node.args[0])
    raise SystemExit(f"error: no serialized descriptor in {source}")


def main() -> None:
    data = serialized_descriptor()
    fdp = descriptor_pb2.FileDescriptorProto.FromString(data)
    assert fdp.name == "model_config.proto" and not fdp.dependency
    (HERE / "model_config.pb").write_bytes(data)
    data = serialized_descriptor("onnx", "onnx_ml_pb2.py")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(data)
    assert fdp.name == "onnx/onnx-ml.proto" and not fdp.dependency, (fdp.name, list(fdp.dependency))
    (HERE / "onnx_ml.pb").write_bytes(data)


if __name__ == "__main__":
    main()
