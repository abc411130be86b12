"""8-bit grid tables entropy-coded in the ONNX file, with the nodes that decode them in the graph.

`code_tables` replaces each 8-bit table `NAME__u8` ([1, F, ry, rx] uint8, grid_quant.py and grid_store.py) that the
code makes smaller by `NAME__u8__coded`, its adaptive Rice code (modelrepo/tablecode.py, the format), and puts in
front of the graph the standard ONNX nodes that compute `NAME__u8` from it: slices of the bytes, bits unpacked by
BitShift and Mod, the unary stream's runs counted by CumSum and ScatterElements, the low bits read by a MatMul with
their weights, the blocks put back in place by TopK (their stable order by parameter) and ScatterND, and the zigzag
undone. They read initializers only, so any onnxruntime (Triton's included) folds them once, when it makes the
session, into the very table the uncoded file held; opset 17 is enough (ScatterElements' reduction is opset 16).
That folding is slow (seconds for a 4 MP model), so the service decodes the tables with numpy instead and gives
onnxruntime the graph without these nodes (service/engine/modelfile.py, modelrepo/onnxfile.py).
"""

from __future__ import annotations

import numpy as np

from modelrepo import ctxcode, tablecode
from modelrepo.tablecode import Layout

MIN_VALUES = 4096  # smaller tables stay as they are (the decoding nodes alone take several kB)
ANS_MIN_VALUES = 256  # the context code's one node costs ~60 bytes
CODES = ("rice", "ans")  # --grid-table-code


def code_tables(onnx_bytes: bytes, code: str = "rice") -> tuple[bytes, dict]:
    """(the graph with its large 8-bit tables coded, a report for the export's metadata); the bytes unchanged and
    {} when no table is worth coding: a table is coded when its code and its decoding nodes take fewer bytes than
    the table. `code`: "rice", the adaptive Rice code the graph decodes (any onnxruntime loads the file), or "ans",
    the context code (modelrepo/ctxcode.py) behind one `DecodeTable` node of this project's domain that the service
    decodes at load (`python -m modelrepo decode` copies
    such a model for another server)."""
    import onnx
    from onnx import numpy_helper

    if code not in CODES:
        raise ValueError(f"table code {code!r} is not one of {', '.join(CODES)}")
    proto = onnx.load_from_string(onnx_bytes)
    graph = proto.graph
    nodes, kept, coded, raw, stored = [], [], 0, 0, 0
    least = ANS_MIN_VALUES if code == "ans" else MIN_VALUES
    for init in graph.initializer:
        if not (init.name.endswith("__u8") and len(init.dims) == 4 and int(np.prod(init.dims)) >= least):
            kept.append(init)
            continue
        q = numpy_helper.to_array(init)
        data = ctxcode.encode(q) if code == "ans" else tablecode.encode(q)
        source = init.name + tablecode.SUFFIX
        if code == "ans":
            new_nodes, consts = [onnx.helper.make_node("DecodeTable", [source], [init.name], domain=ctxcode.DOMAIN)], []
        else:
            new_nodes, consts = decoder(source, tablecode.layout(data), init.name, f"{tablecode.PREFIX}{coded}/")
        extra = sum(len(x.SerializeToString()) for x in new_nodes + consts)  # the decoder's own bytes
        if len(data) + extra >= q.size:
            kept.append(init)
            continue
        kept.append(numpy_helper.from_array(np.frombuffer(data, np.uint8), source))
        nodes += new_nodes
        kept += consts
        coded, raw, stored = coded + 1, raw + q.size, stored + len(data)
    if not coded:
        return onnx_bytes, {}
    old = list(graph.node)
    del graph.node[:], graph.initializer[:]
    graph.node.extend(nodes + old)
    graph.initializer.extend(kept)
    if code == "ans":
        proto.opset_import.append(onnx.helper.make_opsetid(ctxcode.DOMAIN, 1))
    onnx.checker.check_model(proto)
    return proto.SerializeToString(), {
        "coded_tables": coded,
        "coded_bytes": stored,
        "uncoded_bytes": raw,
        "code": "context-coded (ANS), decoded by the service at load (modelrepo/ctxcode.py)"
        if code == "ans"
        else "adaptive Rice, decoded by the graph at load (modelrepo/tablecode.py)",
    }


def decoder(source: str, lay: Layout, output: str, tag: str) -> tuple[list, list]:
    """The nodes (and their constant initializers) that decode the coded bytes `source` into the table `output`;
    the names of their outputs and constants start with `tag` (tablecode.PREFIX and a number), the nodes have none
    (the graph's bytes: a 4 MP model has ~600 of them)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, consts = [], {}

    def const(name: str, value) -> str:
        consts[f"{tag}{name}"] = np.asarray(value)
        return f"{tag}{name}"

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [f"{tag}{out}"], **attrs))
        return f"{tag}{out}"

    def ints(*v) -> np.ndarray:
        return np.array(v, np.int64)

    def cut(x: str, start: int, end: int, out: str) -> str:
        return node("Slice", [x, const(f"{out}_start", ints(start)), const(f"{out}_end", ints(end))], out)

    def bits(section: int, count: int, out: str) -> str:
        """The first `count` bits of a section, most significant first, as uint8 0/1 [count]."""
        start, length = lay.sections[section]
        x = cut(source, start, start + length, f"{out}_bytes")
        x = node("Unsqueeze", [x, const("axis1", ints(1))], f"{out}_column")
        x = node(
            "BitShift", [x, const("shifts", np.arange(7, -1, -1, dtype=np.uint8))], f"{out}_shifted", direction="RIGHT"
        )
        x = node("Mod", [x, const("two_u8", np.uint8(2))], f"{out}_bit")
        x = node("Reshape", [x, const("flat", ints(-1))], f"{out}_bits")
        return cut(x, 0, count, out)

    def number(x: str, rows: int, width: int, out: str) -> str:
        """Rows of `width` bits (uint8 [rows·width]) → their values, int64 [rows]."""
        x = node("Reshape", [x, const(f"{out}_shape", ints(rows, width))], f"{out}_rows")
        x = node("Cast", [x], f"{out}_float", to=TensorProto.FLOAT)
        weights = (2.0 ** np.arange(width - 1, -1, -1)).astype(np.float32)[:, None]
        x = node("MatMul", [x, const(f"{out}_weights", weights)], f"{out}_sum")
        x = node("Reshape", [x, const("flat", ints(-1))], f"{out}_flat")
        return node("Cast", [x], out, to=TensorProto.INT64)

    blocks, width = lay.blocks, lay.block
    params = number(bits(0, blocks * 4, "param_bits"), blocks, 4, "params")
    # the blocks' stable order by parameter: TopK of p·blocks + index, keys all distinct
    key = node(
        "Add",
        [
            node("Mul", [params, const("blocks", ints(blocks))], "param_major"),
            node(
                "Range",
                [const("first", np.int64(0)), const("end", np.int64(blocks)), const("step", np.int64(1))],
                "index",
            ),
        ],
        "key",
    )
    nodes.append(
        helper.make_node(
            "TopK",
            [key, const("k", ints(blocks))],
            [f"{tag}sorted_key", f"{tag}order"],
            largest=0,
            sorted=1,
        )
    )
    order = f"{tag}order"
    parts = []
    if lay.counts[0]:
        parts.append(
            node(
                "ConstantOfShape",
                [const("zeros_shape", ints(lay.counts[0] * width))],
                "zeros",
                value=numpy_helper.from_array(ints(0)),
            )
        )
    if lay.values:
        start, length = lay.sections[1]
        # the value each bit belongs to: the ones before it (exclusive CumSum); a value's high part: its zeros
        unary = node("Cast", [bits(1, length * 8, "unary")], "unary_int", to=TensorProto.INT64)
        owner = node("CumSum", [unary, const("axis0", ints(0))], "owner", exclusive=1)
        zeros = node("Sub", [const("one", ints(1)), unary], "zero_bits")
        counts = node(
            "ConstantOfShape",
            [const("values", ints(lay.values + 1))],
            "no_zeros",
            value=numpy_helper.from_array(ints(0)),
        )
        high = node("ScatterElements", [counts, owner, zeros], "high_all", reduction="add")
        high = cut(high, 0, lay.values, "high")
        at = 0
        for p in range(1, tablecode.PARAMS):
            n, k = lay.counts[p] * width, p - 1
            if not n:
                continue
            part = cut(high, at, at + n, f"high{k}")
            at += n
            if k:
                low = number(bits(1 + k, n * k, f"low{k}_bits"), n, k, f"low{k}")
                part = node("Add", [node("Mul", [part, const(f"scale{k}", ints(1 << k))], f"shifted{k}"), low], f"u{k}")
            parts.append(part)
    u = node("Concat", parts, "sorted", axis=0) if len(parts) > 1 else parts[0]
    u = node("Reshape", [u, const("block_rows", ints(blocks, width))], "sorted_rows")
    empty = node(
        "ConstantOfShape", [const("rows_shape", ints(blocks, width))], "empty", value=numpy_helper.from_array(ints(0))
    )
    u = node("ScatterND", [empty, node("Unsqueeze", [order, const("axis1", ints(1))], "order_column"), u], "placed")
    _, f, ry, rx = lay.shape
    u = node("Reshape", [u, const("channels", ints(f, -1))], "channel_rows")
    u = node("Slice", [u, const("zero", ints(0)), const("used", ints(ry * rx)), const("axis1", ints(1))], "u")
    odd = node("Mod", [u, const("two", ints(2))], "odd")  # r = (u // 2)·(1 − 2·odd) − odd
    sign = node("Sub", [const("one", ints(1)), node("Mul", [odd, const("two", ints(2))], "twice_odd")], "sign")
    r = node("Sub", [node("Mul", [node("Div", [u, const("two", ints(2))], "half"), sign], "magnitude"), odd], "r")
    q = node("Add", [r, const("centres", np.array(lay.centres, np.int64)[:, None])], "q")
    q = node("Reshape", [node("Cast", [q], "q_u8", to=TensorProto.UINT8), const("shape", ints(*lay.shape))], "table")
    nodes[-1].output[0] = output
    return nodes, [numpy_helper.from_array(v, k) for k, v in consts.items()]
