"""An ONNX file's graph read with protobuf alone (no `onnx` package in the serving install), for what the service does
to a file before onnxruntime sees it: decoding its coded tables (modelrepo/tablecode.py).

The message classes are built from `onnx_ml.pb`, the compiled descriptor of ONNX's onnx-ml.proto (see
regen_descriptor.py and NOTICE-onnx.txt).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from . import tablecode
from .tablecode import CodeError

DESCRIPTOR_FILE = Path(__file__).resolve().parent / "onnx_ml.pb"
UINT8 = 2  # TensorProto.DataType
MARKER = tablecode.SUFFIX.encode()  # in the bytes of every file with a coded table


@lru_cache(maxsize=1)
def model_class():
    """ONNX's `onnx.ModelProto` message class."""
    fdp = descriptor_pb2.FileDescriptorProto.FromString(DESCRIPTOR_FILE.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("onnx.ModelProto"))


def has_coded_tables(data: bytes) -> bool:
    """Whether the file may hold coded tables (a byte search: a file without the marker has none)."""
    return MARKER in data


def decoded(data: bytes) -> bytes:
    """The ONNX file with each coded table `NAME__u8__coded` replaced by the table `NAME__u8` it codes, and the nodes
    that decode it in the graph (their outputs and constants named `~N/…`) removed: the graph and initializers of the
    uncoded file, which onnxruntime then loads without running the decoding nodes. The bytes as they are when the
    file has no coded table. CodeError for a coded table that does not decode."""
    if not has_coded_tables(data):
        return data
    try:
        model = model_class().FromString(data)
    except DecodeError as e:
        raise CodeError(f"not an ONNX file: {e}") from None
    graph = model.graph
    coded = [i for i in graph.initializer if i.name.endswith(tablecode.SUFFIX)]
    if not coded:
        return data
    tables = {i.name.removesuffix(tablecode.SUFFIX): _table(i) for i in coded}
    nodes = [n for n in graph.node if not all(o.startswith(tablecode.PREFIX) or o in tables for o in n.output)]
    kept = [
        i
        for i in graph.initializer
        if not i.name.endswith(tablecode.SUFFIX) and not i.name.startswith(tablecode.PREFIX)
    ]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for name, q in tables.items():
        graph.initializer.add(name=name, data_type=UINT8, dims=list(q.shape), raw_data=q.tobytes())
    return model.SerializeToString()


def _table(init) -> np.ndarray:
    if init.data_type != UINT8 or len(init.dims) != 1 or not init.raw_data:
        raise CodeError(f"coded table {init.name!r} is not a 1-D uint8 initializer with raw data")
    try:
        return tablecode.decode(np.frombuffer(init.raw_data, np.uint8))
    except CodeError as e:
        raise CodeError(f"{init.name}: {e}") from None
