"""8-bit grid tables: twice the cells in the same bytes, at about a tenth of a decibel.

A grid model's bytes are almost all its tables, and a table of one feature of one level spans a narrow range
(the pyramid start puts each level's detail in it). `round_tables_8bit` rounds each such channel to 256
evenly spaced values, q·scale + low with q in 0..255, so that the model that is scored and exported *is*
the rounded one; `store_tables_8bit` then stores each table as uint8 in the ONNX file, in front of a
`Cast` to float32, a `Mul` by the channel scales and an `Add` of their lows. All three have constant inputs,
so onnxruntime folds them when it loads the model: a render reads float32 tables as before. A dense grid in its
own render layout (grid_export.py) instead keeps them uint8 through the packing and dequantises after the corner
sum (grid_store.py); those are counted here as stored.
"""

from __future__ import annotations

import numpy as np
import torch

from ..fp16 import restore_in_graph
from .grid import MultiresGrid

LEVELS = 255  # q in 0..255


def channel_range(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, scale) per feature channel (dim 1 of both a dense [1, F, ry, rx] and a hashed [T, F] table),
    shaped to broadcast against the table."""
    dims = [d for d in range(table.dim()) if d != 1]
    low = table.amin(dim=dims, keepdim=True)
    scale = (table.amax(dim=dims, keepdim=True) - low) / LEVELS
    return low, torch.where(scale > 0, scale, torch.ones_like(scale))


def exact_8bit(table: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(q uint8, scale, low float32, shaped as `channel_range` gives them) of a table that `round_tables_8bit` rounded:
    q·scale + low is the table exactly, in float32; None for any other table."""
    table = table.detach().cpu()
    low, scale = channel_range(table)
    q = torch.round((table - low) / scale).clamp(0, LEVELS)
    if not torch.equal(q * scale + low, table):
        return None
    return q.numpy().astype(np.uint8), scale.numpy().astype(np.float32), low.numpy().astype(np.float32)


@torch.no_grad()
def round_tables_8bit(model: torch.nn.Module) -> torch.nn.Module:
    enc = getattr(model, "encoding", None)
    if isinstance(enc, MultiresGrid):
        for table in enc.tables:
            low, scale = channel_range(table)
            q = torch.round((table - low) / scale).clamp(0, LEVELS)
            table.copy_(q * scale + low)
    return model


def store_tables_8bit(onnx_bytes: bytes, model: torch.nn.Module) -> tuple[bytes, dict]:
    """(new ONNX bytes, report). Each initializer equal to one of the model's (rounded) tables is stored as
    uint8 and rebuilt by Cast → Mul → Add nodes in front of its users; tables that the graph already stores as
    uint8 (`NAME__u8`: the packed corners of grid_export.py, dequantised after the corner sum) are counted."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    tables = [t.detach().cpu() for t in model.encoding.tables]
    proto = onnx.load_from_string(onnx_bytes)
    graph = proto.graph
    kept, nodes, stored, values = [], [], 0, 0
    for init in graph.initializer:
        if init.data_type == TensorProto.UINT8 and init.name.endswith("__u8"):
            kept.append(init)
            stored += 1
            values += int(np.prod(init.dims))
            continue
        # the 8-bit storage's own scales and lows, and the dense grid's constants, are no tables (a 1×1 level's
        # table may equal its low)
        own = init.name.endswith(("__scale", "__low")) or init.name.startswith("grid.")
        arr = numpy_helper.to_array(init) if init.data_type == TensorProto.FLOAT and not own else None
        match = next(
            (t for t in tables if arr is not None and tuple(t.shape) == arr.shape and np.array_equal(t.numpy(), arr)),
            None,
        )
        exact = exact_8bit(match) if match is not None else None
        if exact is None:  # not a table, or not rounded by round_tables_8bit: keep it float
            kept.append(init)
            continue
        q, scale, low = exact
        names = {k: f"{init.name}__{k}" for k in ("u8", "scale", "low", "f32", "scaled")}
        kept += [
            numpy_helper.from_array(q, names["u8"]),
            numpy_helper.from_array(scale, names["scale"]),
            numpy_helper.from_array(low, names["low"]),
        ]
        nodes += [
            helper.make_node("Cast", [names["u8"]], [names["f32"]], to=TensorProto.FLOAT),
            helper.make_node("Mul", [names["f32"], names["scale"]], [names["scaled"]]),
            helper.make_node("Add", [names["scaled"], names["low"]], [init.name]),
        ]
        stored += 1
        values += arr.size
    out = restore_in_graph(proto, kept, nodes)
    return out, {
        "tables": "uint8 storage, a float32 scale and low per level and feature",
        "u8_tables": stored,
        "u8_values": int(values),
    }
