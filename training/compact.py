"""The graph of a model file at its fewest bytes, computing exactly what it computed (`compact_graph`).

A small photo model's file was half graph: at 57 KB for a 640² crop (λ 1e-3, training/encodings/grid_rd.py) its
coded tables were 28 KB, and the rest was the tensors' names (torch's and the exporter's paths, each written once
per reader: 10 KB), the grid encoder's constant matrices of 0 and ±1 in float32 (9 KB) and the head's weights in
float32 although they hold float16 values (2.5 KB). This rewrite:
- stores each float initializer of at least `MIN_VALUES` values whose values are all small integers as int8 or
  uint8, or whose values are all float16 numbers as float16, cast back by a `Cast` node in front of its readers
  (onnxruntime, Triton's too, folds the casts once at load; the arithmetic is unchanged);
- renames every other tensor to a short name, and drops the nodes' names, except the names the service finds
  things by (modelrepo/graphnames.py) and the graph's inputs, outputs and initializers.
"""

from __future__ import annotations

import numpy as np

from modelrepo.graphnames import TABLES, read_by_name

MIN_VALUES = 16  # smaller constants are not worth a Cast node's bytes
STORAGE = ((np.int8, "__i8"), (np.uint8, "__byte"), (np.float16, "__fp16"))  # the first exact form wins


def _narrow(a: np.ndarray):
    """(the array in the first exact narrower form, its name suffix) or None."""
    for dtype, suffix in STORAGE:
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            whole = np.all(np.isfinite(a)) and np.all(a == np.round(a))
            if not (whole and a.min() >= info.min and a.max() <= info.max):
                continue
        b = a.astype(dtype)
        if np.array_equal(b.astype(a.dtype), a, equal_nan=False):
            return b, suffix
    return None


def compact_graph(onnx_bytes: bytes) -> tuple[bytes, dict]:
    """(the compacted ONNX bytes, report: bytes before and after, constants narrowed, tensors renamed)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load_from_string(onnx_bytes)
    graph = model.graph
    inits, casts, narrowed = [], [], 0
    for init in graph.initializer:
        a = None
        if init.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE) and not init.name.startswith(TABLES):
            a = numpy_helper.to_array(init)
        found = _narrow(a) if a is not None and a.size >= MIN_VALUES else None
        if found is None:
            inits.append(init)
            continue
        b, suffix = found
        inits.append(numpy_helper.from_array(b, name=init.name + suffix))
        casts.append(helper.make_node("Cast", [init.name + suffix], [init.name], to=init.data_type))
        narrowed += 1
    nodes = casts + list(graph.node)
    keep = {i.name for i in inits} | {v.name for v in graph.input} | {v.name for v in graph.output}
    keep |= {o for n in nodes if n.domain not in ("", "ai.onnx") for o in n.output}  # custom nodes' outputs
    short: dict[str, str] = {}
    skipped: set[str] = set()

    def renamed(name: str) -> str:
        if not name or name in keep or read_by_name(name, node=False):
            return name
        while name not in short:
            new = np.base_repr(len(short) + len(skipped), 36).lower()
            if new in keep:  # a kept name that happens to be short
                skipped.add(new)
            else:
                short[name] = new
        return short[name]

    for n in nodes:
        n.input[:] = [renamed(i) for i in n.input]
        n.output[:] = [renamed(o) for o in n.output]
        if not read_by_name(n.name, node=True):
            n.name = ""
    del graph.value_info[:]  # shapes of intermediates: the runtime infers them again
    del graph.initializer[:], graph.node[:]
    graph.initializer.extend(inits)
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    out = model.SerializeToString()
    return out, {"graph_bytes_before": len(onnx_bytes), "graph_bytes": len(out), "narrowed": narrowed}
