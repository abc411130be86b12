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


def channel_range(table: torch.Tensor, levels: int = LEVELS) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, scale) per feature channel (dim 1 of both a dense [1, F, ry, rx] and a hashed [T, F] table),
    shaped to broadcast against the table: `levels` steps from the channel's least value to its largest."""
    dims = [d for d in range(table.dim()) if d != 1]
    low = table.amin(dim=dims, keepdim=True)
    scale = (table.amax(dim=dims, keepdim=True) - low) / levels
    return low, torch.where(scale > 0, scale, torch.ones_like(scale))


def exact_8bit(table: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(q uint8, scale, low float32, shaped as `channel_range` gives them) of a table that `round_tables_8bit` rounded,
    or that a coarser step rounded (`snap`: a table of one channel on Q < 255 steps, the rate control's native level,
    grid_rate.py): q·scale + low is the table exactly, in float32; None for any other table."""
    table = table.detach().cpu()
    for levels in (LEVELS, *coarser_levels(table)):
        low, scale = channel_range(table, levels)
        q = (table - low).div_(scale).round_().clamp_(0, levels)  # in place: a native level's copies are 4 B/px
        if torch.equal((q * scale).add_(low), table):
            return q.numpy().astype(np.uint8), scale.numpy().astype(np.float32), low.numpy().astype(np.float32)
    return lattice_8bit(table)


def lattice_8bit(table: torch.Tensor, tries: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(q, scale, low) of a dense table whose channels each sit on their own lattice of at most 256 points (the
    rate–distortion fine-tune's, grid_rd.py: a step and a number of steps per channel); None for any other."""
    if table.dim() != 4 or table.dtype != torch.float32:
        return None
    qs, scales, lows = [], [], []
    for c in range(table.shape[1]):
        ch = table[:, c]
        values = torch.unique(ch)
        low, gap = values[0], (values[1:] - values[:-1]).min() if len(values) > 1 else torch.tensor(1.0)
        for n in range(1, tries + 1):
            scale = gap / n
            q = torch.round((ch - low) / scale)
            if float(q.max()) <= LEVELS and torch.equal((q * scale).add_(low), ch):
                break
        else:
            return None
        qs.append(q)
        scales.append(float(scale))
        lows.append(float(low))
    shape = (1, table.shape[1], 1, 1)
    return (
        torch.stack(qs, dim=1).numpy().astype(np.uint8),
        np.array(scales, np.float32).reshape(shape),
        np.array(lows, np.float32).reshape(shape),
    )


def coarser_levels(table: torch.Tensor) -> list[int]:
    """The numbers of steps Q < 255 a table may be on (every channel on as many: the rate control's coarser steps,
    grid_rate.py). A channel on Q steps whose values are m steps apart at the closest has its range over that gap at
    Q/m, so Q is a whole multiple of every channel's such ratio; the candidates are those of the channel with the
    largest ratio that are. A small block's table often leaves steps unused in some channels and not in others."""
    if table.dim() < 2 or table.numel() < 2:
        return []
    ratios = []
    for c in range(table.shape[1]):
        values = torch.unique(table.select(1, c))
        if len(values) >= 2:
            ratios.append(float((values[-1] - values[0]) / (values[1:] - values[:-1]).min()))
    if not ratios or max(ratios) < 0.5:
        return []
    top = max(ratios)

    def whole(x: float) -> bool:
        return abs(x - round(x)) < 1e-2

    found = (round(m * top) for m in range(1, int(LEVELS / top) + 2))
    return [q for q in found if 1 <= q < LEVELS and all(whole(q / r) for r in ratios)]


@torch.no_grad()
def snap(table: torch.Tensor, q: torch.Tensor, levels: int) -> bool:
    """Write a table as q·scale + low per channel (q in 0..levels, both ends present in each channel) with the scale
    and low that `exact_8bit` finds in it again, so that it is stored as these codes; whether it is (the float32
    arithmetic reaches its fixed point within a few rounds)."""
    for _ in range(8):
        low, scale = channel_range(table, levels)
        new = q * scale + low
        if torch.equal(new, table):
            return True
        table.copy_(new)
    return exact_8bit(table) is not None


@torch.no_grad()
def round_tables_8bit(model: torch.nn.Module, levels: list[int] | None = None) -> torch.nn.Module:
    """Each table rounded to 255 steps per channel, or to `levels[i]` steps (the rate control's coarser steps,
    grid_rate.py: written so that `exact_8bit` finds the codes again)."""
    enc = getattr(model, "encoding", None)
    if isinstance(enc, MultiresGrid):
        for i, table in enumerate(enc.tables):
            steps = LEVELS if levels is None else levels[i]
            low, scale = channel_range(table, steps)
            q = torch.round((table - low) / scale).clamp(0, steps)
            table.copy_(q * scale + low)
            if steps != LEVELS:
                snap(table, q, steps)
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
