"""Regenerate `model_config.pb`: Triton's `model_config.proto` as a serialized FileDescriptorProto.

    python -m modelrepo.regen_descriptor     (needs tritonclient, the `dev` extra)

tritonclient ships protoc's output for Triton's published model_config.proto
(tritonclient/grpc/model_config_pb2.py, BSD-3-Clause, NVIDIA; see NOTICE-triton.txt). The
descriptor bytes are read out of that file's source, not imported (importing it pulls in grpc
and the protobuf runtime check), and written next to this module, so that the serving install
parses config.pbtxt with protobuf alone.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from google.protobuf import descriptor_pb2

HERE = Path(__file__).resolve().parent


def serialized_descriptor() -> bytes:
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: tritonclient is not installed (pip install -e '.[dev]')")
    source = Path(list(spec.submodule_search_locations)[0]) / "grpc" / "model_config_pb2.py"
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


if __name__ == "__main__":
    main()
