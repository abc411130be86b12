"""The ONNX graph of a dense multiresolution grid, laid out for fast CPU renders (docs/benchmarks.md, grid_render).

Traced as it trains, a grid model's graph reads each level through its own `GridSample` node and
concatenates the levels' [F, N] outputs into the head: on onnxruntime's CPU kernels that is one
per-point, per-channel walk per level (about 40 % of a render) plus a transposed first Gemm.
`DenseGridGraph` writes the same function another way, for grids whose levels are all dense:

  - at load time (every node below depends on initializers only, so onnxruntime's constant
    folding runs it once when the session is made, and the file keeps the small float16 tables):
    each level's [F, ry, rx] table is edge-padded by one cell on every side and packed into
    "corner cells": cell (i, j) holds the 4 corners of the bilinear square starting there,
    [T(i, j), T(i, j+1), T(i+1, j), T(i+1, j+1)] × F features; the levels are stacked into one
    [cells, 4F] table (32 bytes per cell for F = 2 in float32, so 8× the float16 file);
  - per run: coordinates clipped to [0, 1]² (the padding then gives `grid_sample`'s border
    padding); the source pixel of every level at once by one MatMul ([N, 2] → [N, 2L], in float64
    so that it rounds once, like torch's fused multiply-add, align_corners=False); its floor and fraction;
    one index per level and point (a Gemm on the floors); one `Gather` of all 4 corners of all
    levels ([N, L, 4F]); the bilinear weights as the product of two Gemms of the fractions (so
    no broadcasts over small axes, which onnxruntime runs slowly); the corner sum as a MatMul
    into the head's [N, L·F] features, in the traced layout (level-major, coarsest first). Levels with different
    F (a native finest level of one feature) are packed and gathered in runs of equal F, their features
    concatenated.

Tables that are exactly 8-bit or float16 numbers are stored, packed and gathered in that dtype instead (`storage`,
chosen by grid_store.py when the file is stored): 4·F or 8·F bytes per cell after load, a Cast after the Gather,
and 8-bit tables dequantised after the corner sum.

The head (everything after the encoding) is traced from the model itself. Grids with a hashed
level, more than MAX_PACKED bytes of packed corners in their stored dtype (8-bit tables: ~27 MP) or a run of more
than MAX_CELLS cells (its index is computed in float32: a native level of ~16.7 MP) keep the traced graph. Export
still runs the parity gate against torch on the result.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from modelrepo.graphnames import FEATURES

from .grid import MultiresGrid
from .grid_quant import exact_8bit

MAX_PACKED = 160 * 2**20  # bytes of packed corners in the tables' stored dtype, 4·F values per padded cell: 8-bit
# tables (the grid preset's) reach it at ~27 MP (MAX_CELLS, below, comes first), float32 ones at ~6 MP.
# onnxruntime's constant folding of them peaks at about 4× that where it makes the session (Triton, a plain
# onnxruntime; this service packs them itself: service/engine/shared_tables.py); larger grids keep the traced graph
MAX_CELLS = 2**24  # a run's cells: the graph computes a cell's index in float32, exact up to 2^24 (a native level of
# ~16.7 MP; past it a 24 MP model's parity failed by 0.04)


def plan(module: nn.Module, input_name: str) -> "DenseGridGraph | None":
    """The dense-grid layout for an image model (coords → rgb) on an all-dense grid; None otherwise."""
    enc = getattr(module, "encoding", None)
    if input_name != "coords" or not isinstance(enc, MultiresGrid) or enc.hashed or not hasattr(module, "body"):
        return None
    if stored_packed_bytes(enc) > MAX_PACKED or max(run_cells(enc)) > MAX_CELLS:
        return None
    return DenseGridGraph(module, enc)


def run_cells(enc: MultiresGrid) -> list[int]:
    """Padded cells of each run's packed table."""
    return [sum((rx + 1) * (ry + 1) for rx, ry in enc.sizes[a:b]) for a, b, _ in runs(enc.level_features)]


def stored_packed_bytes(enc: MultiresGrid) -> int:
    """Bytes of the packed corners in the dtype each run's tables will be stored in (grid_store.py): 1 for tables that
    are exactly 8-bit numbers, 2 for float16 numbers, else 4 (a traced export's float32 tables: the same as before)."""
    total = 0
    for (a, b, f), cells in zip(runs(enc.level_features), run_cells(enc)):
        tables = [enc.tables[level].detach().cpu() for level in range(a, b)]
        if all(exact_8bit(t) is not None for t in tables):
            size = 1
        elif all(torch.equal(t.half().float(), t) for t in tables):
            size = 2
        else:
            size = 4
        total += cells * 4 * f * size
    return total


class DenseGridGraph:
    """The encoding's ExportPlan (encodings/base.py): export traces `head` on [N, features] inputs named FEATURES."""

    head_input = FEATURES

    def __init__(self, module: nn.Module, enc: MultiresGrid, storage: list[str] | None = None):
        self.module, self.enc = module, enc
        self.features = enc.out_dim
        # each run's table dtype in the file and in the packed corners: float32, float16 or uint8 (grid_store.py)
        self.storage = storage or ["float32"] * len(runs(enc.level_features))

    @property
    def head(self) -> nn.Module:
        """The model with its encoding replaced by the identity: features [N, L·F] → rgb (its own forward)."""
        head = copy.copy(self.module)
        head._modules = dict(self.module._modules)
        head.encoding = nn.Identity()
        return head

    def compose(self, head_onnx: bytes, input_name: str) -> bytes:
        """The whole graph: this encoder in front of the traced head (whose input is FEATURES)."""
        import onnx
        from onnx import TensorProto, helper

        model = onnx.load_from_string(head_onnx)
        graph = model.graph
        nodes, inits = self._nodes(input_name)
        old = [n for n in graph.node]
        del graph.node[:]
        graph.node.extend(nodes + old)
        graph.initializer.extend(inits)
        del graph.input[:]
        graph.input.append(helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 2]))
        onnx.checker.check_model(model)
        return model.SerializeToString()

    # -- the encoder ------------------------------------------------------------------------------
    def _nodes(self, x: str) -> tuple[list, list]:
        from onnx import TensorProto, helper, numpy_helper

        enc = self.enc
        levels = len(enc.sizes)
        consts: dict[str, np.ndarray] = {}
        nodes: list = []

        def const(name: str, value) -> str:
            value, old = np.asarray(value), consts.get(f"grid.{name}")
            if old is not None and not (old.dtype == value.dtype and np.array_equal(old, value)):
                raise ValueError(f"grid export: the constant {name!r} is already another value")
            consts[f"grid.{name}"] = value
            return f"grid.{name}"

        def node(op: str, inputs: list[str], out: str, output: str = "", **attrs) -> str:
            output = output or f"grid/{out}"
            nodes.append(helper.make_node(op, inputs, [output], name=f"grid/{out}", **attrs))
            return output

        groups = runs(enc.level_features)
        rx = np.array([s[0] for s in enc.sizes], np.float32)
        ry = np.array([s[1] for s in enc.sizes], np.float32)
        r = np.zeros((2, 2 * levels), np.float32)
        r[0, :levels], r[1, levels:] = rx / 2, ry / 2
        offsets, rows, totals = [], [], []
        for a, b, _ in groups:  # each run of levels with equal features has its own packed table
            total = 0
            for sx, sy in enc.sizes[a:b]:
                offsets.append(total)
                rows.append(sx + 1)
                total += (sx + 1) * (sy + 1)
            totals.append(total)
        # floor(ix) ∈ [-1, r-1] on the padded table: index (floor(iy)+1)·(rx+1) + floor(ix)+1 + offset
        m = np.zeros((2 * levels, levels), np.float32)
        m[np.arange(levels), np.arange(levels)] = 1
        m[levels + np.arange(levels), np.arange(levels)] = rows
        base = np.array(offsets, np.float32) + np.array(rows, np.float32) + 1

        v = node("Clip", [x, const("zero", np.float32(0)), const("one", np.float32(1))], "clipped")
        v = node("Mul", [v, const("two", np.float32(2))], "times2")  # grid_sample's [-1, 1] coordinates,
        v = node("Sub", [v, const("one", np.float32(1))], "normalised")  # rounded as torch rounds them
        v = node("Add", [v, const("one", np.float32(1))], "plus1")
        # torch computes fma(x+1, size/2, −½), rounded once: exact in float64, then rounded to float32
        ix = node("Cast", [v], "plus1_f64", to=TensorProto.DOUBLE)
        ix = node("MatMul", [ix, const("half_size", r.astype(np.float64))], "scaled")
        ix = node("Sub", [ix, const("half", np.float64(0.5))], "source_f64")
        ix = node("Cast", [ix], "source", to=TensorProto.FLOAT)  # [N, 2L]
        fl = node("Floor", [ix], "floor")
        frac = node("Sub", [ix, fl], "frac")
        idx = node("Gemm", [fl, const("index", m), const("base", base)], "index_f")
        # int32 indices: the Cast and the Clip cost a third of their int64 forms (3.8 → 0.9 ms of a 512² tile's
        # 67 ms on one thread); the Clip stays on the integers, where it also catches a NaN coordinate's index
        idx_all = node("Cast", [idx], "index_i", to=TensorProto.INT32)
        # the corner weights are linear in (tx, ty, tx·ty): one Gemm per run writes them all, [N, Lr·4Fr]
        fx = node(
            "Slice",
            [
                frac,
                const("s0", np.array([0], np.int64)),
                const("sl", np.array([levels], np.int64)),
                const("ax1", np.array([1], np.int64)),
            ],
            "frac_x",
        )
        fy = node(
            "Slice",
            [
                frac,
                const("sl", np.array([levels], np.int64)),
                const("s2l", np.array([2 * levels], np.int64)),
                const("ax1", np.array([1], np.int64)),
            ],
            "frac_y",
        )
        fxy = node("Mul", [fx, fy], "frac_xy")
        basis = node("Concat", [frac, fxy], "basis", axis=1)  # [N, 3L]
        features = []
        for k, ((a, b, f), total) in enumerate(zip(groups, totals)):
            tag = "" if len(groups) == 1 else f"r{k}/"
            kind = self.storage[k]
            tables = [self._pack(node, const, self._table(consts, level, kind), level, f) for level in range(a, b)]
            packed = node("Concat", tables, f"{tag}corners", axis=0)  # [cells, 4F]
            idx = (
                idx_all
                if len(groups) == 1
                else node(
                    "Slice",
                    [
                        idx_all,
                        const(f"s{a}", np.array([a], np.int64)),
                        const(f"e{b}", np.array([b], np.int64)),
                        const("ax1", np.array([1], np.int64)),
                    ],
                    f"{tag}index_run",
                )
            )
            idx = node("Clip", [idx, const("lo", np.int32(0)), const(f"hi{total}", np.int32(total - 1))], f"{tag}index")
            g = node("Gather", [packed, idx], f"{tag}corner_values", axis=0)  # [N, Lr, 4F]
            g = node(
                "Reshape",
                [g, const(f"flat{(b - a) * 4 * f}", np.array([-1, (b - a) * 4 * f], np.int64))],
                f"{tag}corner_flat",
            )
            if kind != "float32":  # the corners are read in their stored dtype, computed in float32
                g = node("Cast", [g], f"{tag}corner_float", to=TensorProto.FLOAT)
            mw, bw, s = self._weights(levels, a, b, f)
            w = node("Gemm", [basis, const(f"{tag}w", mw), const(f"{tag}w_bias", bw)], f"{tag}weight")
            g = node("Mul", [g, w], f"{tag}weighted")
            out = FEATURES if len(groups) == 1 else ""
            if kind == "uint8":  # Σ_c w_c (q_c·scale + low) = scale·Σ_c w_c q_c + low (the weights sum to 1):
                # the scales folded into the corner sum at load, the lows its bias
                parts = {}
                for part in ("scale", "low"):  # [1, F, 1, 1] per level → [Lr·F], (level, feature)
                    v = node(
                        "Concat", [f"encoding.tables.{level}__{part}" for level in range(a, b)], tag + part, axis=1
                    )
                    parts[part] = node("Reshape", [v, const("flat", np.array([-1], np.int64))], f"{tag}{part}_flat")
                s = node("Mul", [const(f"{tag}corner_sum", s), parts["scale"]], f"{tag}corner_sum_scaled")
                features.append(node("Gemm", [g, s, parts["low"]], f"{tag}features", output=out))  # [N, Lr·F]
            else:
                features.append(node("MatMul", [g, const(f"{tag}corner_sum", s)], f"{tag}features", output=out))
        if len(groups) > 1:
            node("Concat", features, "features", output=FEATURES, axis=1)  # [N, ΣF], coarsest first
        return nodes, [numpy_helper.from_array(a, k) for k, a in consts.items()]

    def _table(self, consts: dict, level: int, kind: str) -> str:
        """The level's table as stored: float32 `encoding.tables.L`, float16 `…__fp16` (training/fp16.py's name) or
        uint8 `…__u8` with its float32 `…__scale` and `…__low` per feature (grid_quant.py's names, which
        training/reexport.py reads back)."""
        name, table = f"encoding.tables.{level}", self.enc.tables[level].detach().cpu()
        if kind == "uint8":
            consts[f"{name}__u8"], consts[f"{name}__scale"], consts[f"{name}__low"] = exact_8bit(table)
            return f"{name}__u8"
        if kind == "float16":
            consts[f"{name}__fp16"] = table.numpy().astype(np.float16)
            return f"{name}__fp16"
        consts[name] = table.numpy().astype(np.float32)
        return name

    @staticmethod
    def _pack(node, const, table: str, level: int, f: int) -> str:
        """[1, F, ry, rx] → edge-padded corner cells [(ry+1)(rx+1), 4F], corners (y, x) = (0,0) (0,1) (1,0) (1,1)
        with the F features inside each; constant-folded at load (as few full-size copies as it takes)."""

        def sl(t, axis, a, b, tag):
            return node(
                "Slice",
                [
                    t,
                    const(f"s{a}", np.array([a], np.int64)),
                    const(f"e{b}", np.array([b], np.int64)),
                    const(f"ax{axis}", np.array([axis], np.int64)),
                ],
                f"l{level}/{tag}",
            )

        end = 2**62
        t = node("Squeeze", [table, const("ax0", np.array([0], np.int64))], f"l{level}/fyx")  # [F, ry, rx]
        t = node("Transpose", [t], f"l{level}/yxf", perm=[1, 2, 0])  # [ry, rx, F]
        t = node("Concat", [sl(t, 0, 0, 1, "top"), t, sl(t, 0, -1, end, "bottom")], f"l{level}/pad_y", axis=0)
        t = node("Concat", [sl(t, 1, 0, 1, "left"), t, sl(t, 1, -1, end, "right")], f"l{level}/pad_x", axis=1)
        t = node(
            "Concat", [sl(t, 1, 0, -1, "x0"), sl(t, 1, 1, end, "x1")], f"l{level}/pairs", axis=2
        )  # [ry+2, rx+1, 2F]
        t = node(
            "Concat", [sl(t, 0, 0, -1, "y0"), sl(t, 0, 1, end, "y1")], f"l{level}/quads", axis=2
        )  # [ry+1, rx+1, 4F]
        return node("Reshape", [t, const(f"cells{4 * f}", np.array([-1, 4 * f], np.int64))], f"l{level}/packed")

    @staticmethod
    def _weights(levels: int, a: int, b: int, f: int):
        """For the run of levels a..b−1 (F features each): the Gemm of the basis [N, 3L] (x fractions, y fractions,
        their products, level by level) → the bilinear weight of each corner in the gathered layout (level, corner,
        feature): (1−tx)(1−ty) = 1 − tx − ty + tx·ty, tx(1−ty) = tx − tx·ty, (1−tx)ty = ty − tx·ty, tx·ty; and the
        corner sum → (level, feature)."""
        width = (b - a) * 4 * f
        mw, bw = np.zeros((3 * levels, width), np.float32), np.zeros(width, np.float32)
        s = np.zeros((width, (b - a) * f), np.float32)
        for i, level in enumerate(range(a, b)):
            x, y, xy = level, levels + level, 2 * levels + level
            for k, (cx, cy, cxy, c1) in enumerate(((-1, -1, 1, 1), (1, 0, -1, 0), (0, 1, -1, 0), (0, 0, 1, 0))):
                for c in range(f):
                    j = (i * 4 + k) * f + c
                    mw[x, j], mw[y, j], mw[xy, j], bw[j] = cx, cy, cxy, c1
                    s[j, i * f + c] = 1
        return mw, bw, s


def runs(features: list[int]) -> list[tuple[int, int, int]]:
    """(first level, end, F) of each run of consecutive levels with equal features: one packed table and one
    Gather each."""
    out: list[tuple[int, int, int]] = []
    for level, f in enumerate(features):
        if out and out[-1][2] == f:
            out[-1] = (out[-1][0], level + 1, f)
        else:
            out.append((level, level + 1, f))
    return out
