"""A dense grid model's tables and head, read from its own graph (service/engine/lattice.py).

A grid model exported in the dense layout (training/encodings/grid_export.py) computes, per sample, the bilinear
features of every level (the packed corner cells, one Gather) and then its head (an MLP: features → rgb). On an
axis-aligned render the samples form a lattice, columns × rows, and a level's bilinear samples are separable: the
x weights per column, the y weights per row. So the render needs the levels' tables and the head alone, and both
are in the graph: each level's table is the input of its `grid/lL/fyx` node (an initializer: uint8 with its
`__scale` and `__low` per feature, float16 or float32; or a tensor that constant nodes compute from initializers,
which are evaluated here once), and the head is every node between the features (`grid_features`) and `rgb`.

`read_lattice` returns them, or None for a graph without that layout (hashed or traced grids, Fourier and SineKAN
models); `head_layers` reads a head of Gemms with ReLU between them (and a final Sigmoid) as its weights, for the
one-pass kernel (lattice.py, `Kernel`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelrepo.graphnames import FEATURES, LEVEL_NODE
from modelrepo.onnxfile import FLOAT, UINT8, as_model, attributes, decoded_model, model_class, node, tensor, to_array
from modelrepo.onnxfile import value_info as add_value_info

log = logging.getLogger(__name__)
# the head's nodes that keep their form on features laid out as planes: elementwise with no other tensor input, and
# the arithmetic ones with a scalar
ELEMENTWISE = {"Relu", "Sigmoid", "Tanh", "Sin", "Cos", "Exp", "LeakyRelu", "Elu", "Selu", "Softplus", "HardSigmoid"}
ELEMENTWISE |= {"Identity", "Cast", "Erf", "Abs", "Neg"}
SCALAR_BINARY = {"Add", "Sub", "Mul", "Div", "Pow"}


@dataclass(frozen=True)
class GridLevel:
    """One level's table, [F, ry, rx] (as the graph stores it): uint8 with value q·scale + low, or float32 (scale
    and low None)."""

    table: np.ndarray
    scale: np.ndarray | None = None  # [F] float32
    low: np.ndarray | None = None

    @property
    def size(self) -> tuple[int, int]:
        return self.table.shape[2], self.table.shape[1]

    @property
    def features(self) -> int:
        return self.table.shape[0]

    @property
    def nbytes(self) -> int:
        return self.table.nbytes


def read_file(path) -> tuple[list[GridLevel], bytes] | None:
    """The lattice of a model file, its entropy-coded tables decoded first (modelrepo/onnxfile.py): the graph read
    is the uncoded file's; a load's file (service/engine/modelfile.py, `ModelFile`) that was decoded for its session
    has it read already. Read with protobuf alone: the `onnx` package costs a server ~10 MiB resident."""
    read = getattr(path, "lattice_read", None)
    return read if read is not None else read_lattice(decoded_model(Path(path).read_bytes()))


def read_lattice(model) -> tuple[list[GridLevel], bytes] | None:
    """(the levels, the head graph's bytes) of an ONNX ModelProto in the dense grid layout; None otherwise."""
    model = as_model(model)
    graph = model.graph
    producers = {out: n for n in graph.node for out in n.output}
    inits = {i.name: i for i in graph.initializer}
    found = {int(m.group(1)): n.input[0] for n in graph.node if (m := LEVEL_NODE.match(n.name))}
    if not found or sorted(found) != list(range(len(found))) or FEATURES not in producers:
        return None
    levels = []
    for level in range(len(found)):
        name = found[level]
        if name in inits and inits[name].data_type == UINT8 and name.endswith("__u8"):
            base = name[: -len("__u8")]
            if f"{base}__scale" not in inits or f"{base}__low" not in inits:
                return None
            q = to_array(inits[name])
            scale = to_array(inits[f"{base}__scale"]).astype(np.float32).reshape(-1)
            low = to_array(inits[f"{base}__low"]).astype(np.float32).reshape(-1)
        else:
            q = _constant(model, name, producers, inits)
            if q is None:
                return None
            q, scale, low = q.astype(np.float32), None, None
        if (
            q.ndim != 4
            or q.shape[0] != 1
            or (scale is not None and (len(scale) != q.shape[1] or len(low) != len(scale)))
        ):
            return None
        levels.append(GridLevel(np.ascontiguousarray(q[0]), scale, low))
    # the head: every node between the features and rgb; none of them may read the coordinates
    nodes, seen, todo = [], set(), ["rgb"]
    while todo:
        name = todo.pop()
        if name == FEATURES or name in seen or name in inits:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is None:  # a graph input (the coordinates): the head is not apart from the encoder
            return None
        nodes.append(node)
        todo.extend(i for i in node.input if i)
    keep = {id(n) for n in nodes}
    ordered = [n for n in graph.node if id(n) in keep]
    head, consts = channel_major(ordered, inits)
    used = {i for n in head for i in n.input}
    width = sum(level.features for level in levels)
    out = model_class()(ir_version=model.ir_version, opset_import=model.opset_import)
    out.graph.name = "head"
    out.graph.node.extend(head)
    add_value_info(out.graph.input, FEATURES, FLOAT, [width, "N"])
    add_value_info(out.graph.output, "rgb", FLOAT, [3, "N"])
    out.graph.initializer.extend([i for i in graph.initializer if i.name in used] + consts)
    return levels, out.SerializeToString()


def channel_major(nodes: list, inits: dict) -> tuple[list, list]:
    """(nodes, new initializers): the head on features [ΣF, N] (a plane per feature, as the lattice writes them)
    giving rgb [3, N]. Each Gemm X·op(B) + C on the data becomes op(B)ᵀ·Xᵀ + Cᵀ (C as a column), elementwise
    nodes stay as they are (onnxruntime runs W·Xᵀ with N along the vector lanes); a head with any other node gets
    a Transpose before and after it instead."""
    out, data = [], {FEATURES}
    column = tensor("lattice/column", np.array([-1, 1], np.int64))
    for n in nodes:
        on_data = [i for i in n.input if i in data]
        if not on_data:  # weights rebuilt by nodes (float16 storage): the same in either layout
            out.append(n)
            continue
        attrs = attributes(n)
        if n.op_type == "Gemm" and on_data == [n.input[0]] and not attrs.get("transA", 0):
            bias = []
            if len(n.input) > 2 and n.input[2]:
                bias = [f"{n.output[0]}/bias_column"]
                out.append(node("Reshape", [n.input[2], column.name], bias))
            out.append(
                node(
                    "Gemm",
                    [n.input[1], n.input[0], *bias],
                    list(n.output),
                    name=n.name,
                    transA=0 if attrs.get("transB", 0) else 1,
                    alpha=float(attrs.get("alpha", 1.0)),
                    beta=float(attrs.get("beta", 1.0)),
                )
            )
        elif n.op_type in ELEMENTWISE or (
            n.op_type in SCALAR_BINARY
            and len(on_data) == 1
            and all(i in data or (i in inits and int(np.prod(inits[i].dims)) == 1) for i in n.input)
        ):
            out.append(n)
        else:
            return _transposed(nodes), []
        data.update(n.output)
    return out, [column]


def head_layers(head: bytes) -> tuple[list[tuple[np.ndarray, np.ndarray]], bool] | None:
    """The layers (W [out, in], b [out], float32) of a channel-major head (`channel_major`) that is Gemms with a
    ReLU after each but the last, and whether a Sigmoid ends it; None for any other head."""
    model = model_class().FromString(head)
    graph = model.graph
    producers = {out: n for n in graph.node for out in n.output}
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list] = {}
    for n in graph.node:
        for i in set(n.input):
            readers.setdefault(i, []).append(n)

    def value(name: str) -> np.ndarray | None:  # not recursive itself: a closure that calls itself is a cycle
        return _weight(name, producers, inits)

    layers, sigmoid, data = [], False, FEATURES
    while data != "rgb":
        nodes = readers.get(data, [])
        if len(nodes) != 1 or sigmoid:
            return None
        n = nodes[0]
        attrs = attributes(n)
        if n.op_type == "Gemm" and n.input[1] == data and not attrs.get("transB", 0) and all(r for *_, r in layers):
            w = value(n.input[0])
            bias = value(n.input[2]) if len(n.input) > 2 else None
            if w is None or w.ndim != 2 or (len(n.input) > 2 and n.input[2] and bias is None):
                return None
            w = (w.T if attrs.get("transA", 0) else w) * np.float32(attrs.get("alpha", 1.0))
            b = np.zeros(len(w), np.float32) if bias is None else bias.reshape(-1) * np.float32(attrs.get("beta", 1.0))
            if b.size == 1:
                b = np.full(len(w), b[0], np.float32)
            if b.shape != (len(w),):
                return None
            layers.append((np.ascontiguousarray(w, np.float32), np.ascontiguousarray(b, np.float32), False))
        elif n.op_type == "Relu" and layers and not layers[-1][2]:
            layers[-1] = (*layers[-1][:2], True)
        elif n.op_type == "Sigmoid" and layers and not layers[-1][2]:
            sigmoid = True
        else:
            return None
        data = n.output[0]
    if not layers or layers[-1][2] or not all(r for _, _, r in layers[:-1]) or len(layers[-1][0]) != 3:
        return None
    for (w, _, _), (nxt, _, _) in zip(layers, layers[1:]):
        if nxt.shape[1] != len(w):
            return None
    return [(w, b) for w, b, _ in layers], sigmoid


def _weight(name: str, producers: dict, inits: dict) -> np.ndarray | None:
    """A weight of a head: an initializer, or one reshaped or cast (float16 storage) by nodes; None otherwise."""
    if name in inits:
        return to_array(inits[name]).astype(np.float32)
    node = producers.get(name)
    if node is None or node.op_type not in ("Reshape", "Cast"):
        return None
    v = _weight(node.input[0], producers, inits)
    if v is None or node.op_type == "Cast":
        return v
    shape = _weight(node.input[1], producers, inits)
    return None if shape is None else v.reshape(shape.astype(np.int64))


def _transposed(nodes: list) -> list:
    """The head's nodes as they are, between a Transpose of the features and one of rgb."""
    rows, rgb = f"{FEATURES}/rows", "rgb/rows"
    renamed = []
    for n in nodes:
        m = type(n)()
        m.CopyFrom(n)
        m.input[:] = [rows if i == FEATURES else i for i in n.input]
        m.output[:] = [rgb if o == "rgb" else o for o in n.output]
        renamed.append(m)
    first = node("Transpose", [FEATURES], [rows], perm=[1, 0])
    return [first, *renamed, node("Transpose", [rgb], ["rgb"], perm=[1, 0])]


def _constant(model, name: str, producers: dict, inits: dict) -> np.ndarray | None:
    """The value of a tensor that depends on initializers only (a table stored in another form and rebuilt by
    nodes of the graph), evaluated once by onnx's reference evaluator; None if it reads a graph input."""
    import onnx  # only for such a table (not the 8-bit grids'): ~10 MiB resident once imported
    from onnx.reference import ReferenceEvaluator

    if name in inits:
        return to_array(inits[name])
    nodes, seen, todo = [], set(), [name]
    while todo:
        t = todo.pop()
        if t in seen or t in inits or not t:
            continue
        seen.add(t)
        producer = producers.get(t)
        if producer is None:
            return None
        nodes.append(producer)
        todo.extend(producer.input)
    keep = {id(n) for n in nodes}
    ordered = [n for n in model.graph.node if id(n) in keep]
    used = {i for n in ordered for i in n.input}
    proto = model_class()(ir_version=model.ir_version, opset_import=model.opset_import)
    proto.graph.name = "table"
    proto.graph.node.extend(ordered)
    proto.graph.output.add(name=name)
    proto.graph.initializer.extend([i for i in model.graph.initializer if i.name in used])
    try:
        return np.asarray(ReferenceEvaluator(onnx.load_from_string(proto.SerializeToString())).run(None, {})[0])
    except Exception as e:  # an operator the reference evaluator lacks: the plain path stays
        log.info("lattice: the table %s could not be evaluated (%s)", name, e)
        return None
