"""How a dense grid's packed corners are held in memory: the tables' own dtype, dequantised after the corner sum.

`DenseGridGraph` (grid_export.py) packs each level's table into corner cells when onnxruntime makes the session;
in float32 that is 16·F bytes per padded cell, about 22 bytes per image pixel resident for a 1920×1080 photo
model with the grid preset (a native luma level and 8-bit tables), most of a session's memory. So, when the
model's tables are already 8-bit numbers (grid_quant.py's `round_tables_8bit`) or float16 numbers (--fp16-weights),
the encoder is written again with the tables stored, packed and gathered in that dtype (`pack_stored`):

  - uint8 (4·F bytes per cell): one Gather of the uint8 corners, a Cast to float32, the bilinear weights, and
    the corner sum with each level-feature's scale folded into its matrix and its low as the bias,
    scale·Σ_c w_c q_c + low = Σ_c w_c (q_c·scale + low) since the four weights sum to 1 (to float rounding, within
    the export's parity gate);
  - float16 (8·F bytes per cell): the same Gather and Cast, float16 → float32 being exact: the same sums as the
    float32 corners to the bit.

A run of levels (one packed table) is stored so only if every table in it is exactly such numbers; otherwise it
stays float32 and the other storage steps (`store_tables_8bit`, `store_weights_fp16`) rebuild its tables in
front of the packing, as before. The traced graph (hashed or large grids) is left as it is.
"""

from __future__ import annotations

import torch
from torch import nn

from modelrepo.graphnames import FEATURES

from .grid import MultiresGrid
from .grid_export import plan, runs
from .grid_quant import exact_8bit

BYTES = {"uint8": 1, "float16": 2, "float32": 4}


def run_storage(enc: MultiresGrid, table_bits: int) -> list[str]:
    """The dtype of each run's packed table: uint8 for 8-bit tables that are exactly 8-bit numbers, float16 for
    tables that are exactly float16 numbers, float32 otherwise."""
    out = []
    for a, b, _ in runs(enc.level_features):
        tables = [enc.tables[level].detach().cpu() for level in range(a, b)]
        if table_bits == 8 and all(exact_8bit(t) is not None for t in tables):
            out.append("uint8")
        elif all(torch.equal(t.half().float(), t) for t in tables):
            out.append("float16")
        else:
            out.append("float32")
    return out


def packed_bytes(enc: MultiresGrid, storage: list[str]) -> int:
    """Bytes of the packed corner cells once a session has folded them: 4·F values per padded cell."""
    total = 0
    for (a, b, f), kind in zip(runs(enc.level_features), storage):
        cells = sum((rx + 1) * (ry + 1) for rx, ry in enc.sizes[a:b])
        total += cells * 4 * f * BYTES[kind]
    return total


def pack_stored(onnx_bytes: bytes, model: nn.Module, table_bits: int) -> tuple[bytes, dict]:
    """(the graph with its dense-grid encoder written again in the tables' storage dtypes, a report for the
    metadata's export); the bytes unchanged, and {}, for a graph without that encoder or tables in float32."""
    import onnx

    proto = onnx.load_from_string(onnx_bytes)
    graph = proto.graph
    producers = {out: n for n in graph.node for out in n.output}
    layout = plan(model, graph.input[0].name) if len(graph.input) == 1 else None
    if layout is None or FEATURES not in producers:
        return onnx_bytes, {}
    storage = run_storage(layout.enc, table_bits)
    if all(kind == "float32" for kind in storage):
        return onnx_bytes, {}
    layout.storage = storage
    # the old encoder: every node the features depend on, and the initializers only those nodes read
    old, todo = set(), [FEATURES]
    while todo:
        n = producers.get(todo.pop())
        if n is not None and id(n) not in old:
            old.add(id(n))
            todo.extend(n.input)
    rest = [n for n in graph.node if id(n) not in old]
    used, read = {name for n in rest for name in n.input}, {name for n in graph.node for name in n.input}
    inits = [i for i in graph.initializer if i.name in used or i.name not in read]
    nodes, new_inits = layout._nodes(graph.input[0].name)
    if {i.name for i in inits} & {i.name for i in new_inits}:
        raise ValueError("grid export: the head's initializers share a name with the encoder's")
    del graph.node[:], graph.initializer[:]
    graph.node.extend(nodes + rest)
    graph.initializer.extend(inits + new_inits)
    onnx.checker.check_model(proto)
    return proto.SerializeToString(), {
        "packed_corners": storage,
        "packed_bytes": packed_bytes(layout.enc, storage),
        "in_memory": "corner cells packed at load in the tables' stored dtype, read by one Gather per run and "
        "cast to float32 (8-bit tables dequantised after the corner sum)",
    }
