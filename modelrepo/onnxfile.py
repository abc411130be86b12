"""An ONNX file's graph read with protobuf alone (no `onnx` package in the serving install), for what the service does
to a file before onnxruntime sees it: decoding its coded tables (modelrepo/tablecode.py).

The message classes are built from `onnx_ml.pb`, the compiled descriptor of ONNX's onnx-ml.proto (see
regen_descriptor.py and NOTICE-onnx.txt).
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from . import tablecode
from .onnxproto import DESCRIPTOR_FILE, message_class, model_class  # noqa: F401 - this module's names too
from .tablecode import CodeError

UINT8, FLOAT, INT64 = 2, 1, 7  # TensorProto.DataType
# TensorProto.DataType → numpy, and the typed field that holds values without raw_data (onnx's numpy_helper)
DTYPES = {
    1: (np.float32, "float_data"),
    2: (np.uint8, "int32_data"),
    3: (np.int8, "int32_data"),
    4: (np.uint16, "int32_data"),
    5: (np.int16, "int32_data"),
    6: (np.int32, "int32_data"),
    7: (np.int64, "int64_data"),
    9: (np.bool_, "int32_data"),
    10: (np.float16, "int32_data"),  # its bits, as uint16
    11: (np.float64, "double_data"),
    12: (np.uint32, "uint64_data"),
    13: (np.uint64, "uint64_data"),
}
ATTRIBUTE = {1: "f", 2: "i", 3: "s", 4: "t", 5: "g", 6: "floats", 7: "ints", 8: "strings"}  # AttributeProto.type
MARKER = tablecode.SUFFIX.encode()  # in the bytes of every file with a coded table


def as_model(model):
    """`model` as this module's ModelProto: itself, or another one (the `onnx` package's) through its bytes."""
    cls = model_class()
    return model if isinstance(model, cls) else cls.FromString(model.SerializeToString())


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
    model = _parsed(data)
    return model.SerializeToString() if _decode(model) else data


def decoded_model(data: bytes):
    """`decoded`'s graph as a ModelProto message, without serialising it again (the file's own when it has no coded
    table). CodeError for bytes that are not an ONNX file or a coded table that does not decode."""
    model = _parsed(data)
    if has_coded_tables(data):
        _decode(model)
    return model


def _parsed(data: bytes):
    try:
        return model_class().FromString(data)
    except DecodeError as e:
        raise CodeError(f"not an ONNX file: {e}") from None


def _decode(model) -> bool:
    """Replace `model`'s coded tables by their tables and drop their decoding nodes; whether it had any."""
    graph = model.graph
    coded = [i for i in graph.initializer if i.name.endswith(tablecode.SUFFIX)]
    if not coded:
        return False
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
    ours = [o for o in model.opset_import if o.domain != "ai.inr-serve"]  # the context code's DecodeTable nodes'
    if len(ours) != len(model.opset_import):
        del model.opset_import[:]
        model.opset_import.extend(ours)
    return True


def _table(init) -> np.ndarray:
    if init.data_type != UINT8 or len(init.dims) != 1 or not init.raw_data:
        raise CodeError(f"coded table {init.name!r} is not a 1-D uint8 initializer with raw data")
    try:
        return tablecode.decode(np.frombuffer(init.raw_data, np.uint8))
    except CodeError as e:
        raise CodeError(f"{init.name}: {e}") from None


def to_array(tensor) -> np.ndarray:
    """A TensorProto's value (onnx's numpy_helper.to_array for the types a model's weights have). CodeError for
    another type or a size that disagrees with its dims."""
    if tensor.data_type not in DTYPES or tensor.data_location == 1:  # 1: EXTERNAL
        raise CodeError(f"tensor {tensor.name!r}: data type {tensor.data_type} is not read here")
    dtype, field = DTYPES[tensor.data_type]
    dims = tuple(tensor.dims)
    if tensor.raw_data:
        a = np.frombuffer(tensor.raw_data, np.dtype(dtype).newbyteorder("<"))
    elif tensor.data_type == 10:
        a = np.asarray(tensor.int32_data, np.uint16).view(np.float16)
    else:
        a = np.asarray(getattr(tensor, field), dtype)
    if a.size != int(np.prod(dims, dtype=np.int64)):
        raise CodeError(f"tensor {tensor.name!r}: {a.size} values for dims {list(dims)}")
    return a.astype(dtype, copy=False).reshape(dims)


def attributes(node) -> dict:
    """A NodeProto's attributes by name (onnx's helper.get_attribute_value)."""
    out = {}
    for a in node.attribute:
        value = getattr(a, ATTRIBUTE.get(a.type, "s"))
        out[a.name] = list(value) if a.type in (6, 7, 8) else value
    return out


def node(op: str, inputs: list[str], outputs: list[str], name: str = "", **attrs):
    """A NodeProto (onnx's helper.make_node) with float, int and int-list attributes."""
    n = message_class("NodeProto")(op_type=op, input=inputs, output=outputs, name=name)
    for key, value in attrs.items():
        if isinstance(value, float):
            n.attribute.add(name=key, type=1, f=value)
        elif isinstance(value, (list, tuple)):
            n.attribute.add(name=key, type=7, ints=[int(v) for v in value])
        else:
            n.attribute.add(name=key, type=2, i=int(value))
    return n


def tensor(name: str, array: np.ndarray):
    """A TensorProto of `array` (onnx's numpy_helper.from_array), its values as raw data."""
    code = next(c for c, (dtype, _) in DTYPES.items() if np.dtype(dtype) == array.dtype)
    return message_class("TensorProto")(
        name=name, data_type=code, dims=list(array.shape), raw_data=np.ascontiguousarray(array).tobytes()
    )


def value_info(field, name: str, elem_type: int, dims: list) -> None:
    """Append a tensor's ValueInfoProto to a graph's inputs or outputs (`field`): int dims fixed, str dims named."""
    v = field.add(name=name)
    v.type.tensor_type.elem_type = elem_type
    for d in dims:
        if isinstance(d, str):
            v.type.tensor_type.shape.dim.add(dim_param=d)
        else:
            v.type.tensor_type.shape.dim.add(dim_value=d)
