"""ONNX's message classes built from `onnx_ml.pb`, the compiled descriptor of ONNX's onnx-ml.proto (see
regen_descriptor.py and NOTICE-onnx.txt): an ONNX file read with protobuf alone, no `onnx` package. Used by
onnxfile.py (coded tables) and autocomplete.py (a graph's signature)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DESCRIPTOR_FILE = Path(__file__).resolve().parent / "onnx_ml.pb"


@lru_cache(maxsize=None)
def message_class(name: str = "ModelProto"):
    """ONNX's message class `onnx.NAME` (ModelProto, NodeProto, TensorProto, …)."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(f"onnx.{name}"))


@lru_cache(maxsize=1)
def _pool():
    fdp = descriptor_pb2.FileDescriptorProto.FromString(DESCRIPTOR_FILE.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


def model_class():
    """ONNX's `onnx.ModelProto` message class."""
    return message_class("ModelProto")
