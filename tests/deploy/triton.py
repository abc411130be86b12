"""Triton's ModelConfig message, for strict parsing of config.pbtxt files.

tritonclient ships the protoc output for model_config.proto (tritonclient/grpc/
model_config_pb2.py), which holds the serialized FileDescriptorProto. We read that descriptor
out of the file instead of importing the module, so the protobuf *runtime* version check in
the generated code cannot break the tests, and build the message class from it. This is read
fresh from tritonclient, independently of the copy the service ships (modelrepo/model_config.pb).
"""

from __future__ import annotations

from functools import lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from modelrepo.regen_descriptor import serialized_descriptor


@lru_cache(maxsize=1)
def model_config_class():
    fdp = descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


def parse_config(text: str):
    """Parse config.pbtxt text; unknown fields, bad enum values or syntax errors raise ParseError."""
    return text_format.Parse(text, model_config_class()())


DATA_TYPE_TO_ONNX = {
    "TYPE_FP32": 1,
    "TYPE_UINT8": 2,
    "TYPE_INT8": 3,
    "TYPE_INT32": 6,
    "TYPE_INT64": 7,
    "TYPE_BOOL": 9,
    "TYPE_FP16": 10,
    "TYPE_FP64": 11,
}
