"""Half-size model files (digit classifiers, grid images): weights stored as float16, computed in float32.

`round_weights_fp16` rounds every floating parameter of a torch model to the nearest float16
value (kept as float32), so the model that is scored and exported *is* the rounded one.
`store_weights_fp16` then rewrites the ONNX graph: each large float32 initializer whose values
are all exactly float16 numbers is stored as float16 and cast back to float32 by a `Cast` node
in front of its users. The arithmetic is unchanged (onnxruntime folds the casts at load time);
only the file halves. An initializer that is not exact (a buffer, a folded constant) stays
float32, so the graph computes exactly what the rounded torch model computes.
"""

from __future__ import annotations

import numpy as np
import torch

MIN_ELEMENTS = 4096  # smaller tensors are not worth a Cast node


@torch.no_grad()
def round_weights_fp16(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        if p.is_floating_point():
            p.copy_(p.half().float())
    return model


def store_weights_fp16(onnx_bytes: bytes, min_elements: int = MIN_ELEMENTS) -> tuple[bytes, dict]:
    """(new ONNX bytes, report: how many initializers / values went to float16, bytes before/after)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load_from_string(onnx_bytes)
    graph = model.graph
    casts, kept, converted, values = [], [], 0, 0
    for init in graph.initializer:
        arr = numpy_helper.to_array(init) if init.data_type == TensorProto.FLOAT else None
        if arr is None or arr.size < min_elements or not np.array_equal(arr.astype(np.float16).astype(np.float32), arr):
            kept.append(init)
            continue
        half = numpy_helper.from_array(arr.astype(np.float16), name=f"{init.name}__fp16")
        kept.append(half)
        casts.append(
            helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT, name=f"{init.name}__to_fp32")
        )
        converted += 1
        values += arr.size
    out = restore_in_graph(model, kept, casts)
    return out, {
        "weights": "float16 storage, float32 compute",
        "fp16_initializers": converted,
        "fp16_values": int(values),
        "bytes_fp32": len(onnx_bytes),
        "bytes": len(out),
    }


def restore_in_graph(model, initializers: list, nodes: list) -> bytes:
    """The graph with `initializers` as its initializers and `nodes` (which rebuild the values the rest of the
    graph reads under their old names) in front of its nodes; checked and serialized."""
    import onnx

    graph = model.graph
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + rest)
    onnx.checker.check_model(model)
    return model.SerializeToString()
