"""8-bit and float16 grid tables held so in memory (training/encodings/grid_store.py): the packed corner cells keep
the tables' dtype through the load-time folding, a Cast after the one Gather per run, the 8-bit tables dequantised
after the corner sum, within the export's parity gate."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto

from modelrepo.onnxfile import decoded
from training.encodings import EncodingConfig, encoding_for, grid_export
from training.encodings.grid_quant import round_tables_8bit
from training.encodings.grid_store import pack_stored, packed_bytes
from training.export import check_parity, export_onnx, ort_session
from training.fp16 import round_weights_fp16, store_weights_fp16
from training.image_models import ImageINR, ImageModelConfig
from training.reexport import stored_weights

EDGES = np.array([[0, 0], [1, 1], [0, 1], [1, 0], [0.5, 0], [1, 0.5], [-3, 7], [1e30, -1e30], [-1e30, 0.5]], np.float32)
W, H = 90, 60  # a small non-square image
SHAPES = {"several levels": {"grid_levels": 4}, "a native finest level": {"grid_levels": 4, "grid_finest_features": 1}}
DTYPE = {8: TensorProto.UINT8, 16: TensorProto.FLOAT16}


def stored_model(bits: int, **kw) -> tuple[ImageINR, bytes, dict]:
    """A grid model as fit-image finishes it (float16 weights; 8-bit tables rounded), exported and stored as
    fit-image stores it: (model, ONNX bytes, the encoding's storage report)."""
    enc = EncodingConfig(name="grid", image_size=[W, H], grid_table_bits=bits, **kw)
    net = ImageINR(ImageModelConfig(depth=2, width=32, encoding=enc)).eval()
    with torch.no_grad():  # trained tables differ from cell to cell; the init (±1e-4) would hide rounding
        for t in net.encoding.tables:
            t.normal_(0, 0.5)
    round_weights_fp16(net)
    if bits == 8:
        round_tables_8bit(net)
    onnx_bytes, report = encoding_for(enc).store(enc, net, export_onnx(net, torch.rand(8, 2), "coords", ["rgb"]))
    onnx_bytes, _ = store_weights_fp16(onnx_bytes)
    return net, onnx_bytes, report


def gather_tables(graph) -> list:
    """For each Gather of packed corners: the initializers its data input is computed from (the chain up to it)."""
    producers = {out: n for n in graph.node for out in n.output}
    inits = {i.name: i for i in graph.initializer}
    out = []
    for g in (n for n in graph.node if n.op_type == "Gather"):
        found, todo, seen = [], [g.input[0]], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in inits:
                found.append(inits[name])
            elif name in producers:
                todo.extend(producers[name].input)
        out.append(found)
    return out


def folded(onnx_bytes: bytes, tmp_path) -> onnx.GraphProto:
    """The graph as onnxruntime holds it after its load-time optimisations (constant folding)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.optimized_model_filepath = str(tmp_path / "folded.onnx")
    ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
    return onnx.load(str(tmp_path / "folded.onnx")).graph


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_stored_tables_are_gathered_in_their_dtype_and_match_torch(bits, shape, tmp_path):
    net, onnx_bytes, report = stored_model(bits, **SHAPES[shape])
    kind = {8: "uint8", 16: "float16"}[bits]
    runs = grid_export.runs(net.encoding.level_features)
    assert report["tables"]["packed_corners"] == [kind] * len(runs) == [kind] * (1 if shape == "several levels" else 2)
    # the file's large tables are entropy-coded (grid_code.py); decoded as the service decodes them, the graph is
    # the uncoded one
    graph = onnx.load_from_string(decoded(onnx_bytes)).graph
    assert "GridSample" not in {n.op_type for n in graph.node}
    # in the file: every packed Gather reads a chain of the stored tables only, no float32 table in front of it
    chains = gather_tables(graph)
    assert len(chains) == len(runs)
    tables = [i for chain in chains for i in chain if i.name.startswith("encoding.tables.")]
    assert sorted(i.name for i in tables) == sorted(
        f"encoding.tables.{level}__{'u8' if bits == 8 else 'fp16'}" for level in range(len(net.encoding.tables))
    )
    assert all(i.data_type == DTYPE[bits] for i in tables)
    # as onnxruntime folds it: each Gather's data is one initializer of the stored dtype, [cells, 4F]
    loaded = folded(onnx_bytes, tmp_path)
    inits = {i.name: i for i in loaded.initializer}
    packed = [inits[n.input[0]] for n in loaded.node if n.op_type == "Gather" and n.input[0] in inits]
    assert len(packed) == len(runs) and all(p.data_type == DTYPE[bits] for p in packed)
    assert sorted(list(p.dims)[1] for p in packed) == sorted(4 * f for _, _, f in runs)
    assert sum(int(np.prod(p.dims)) for p in packed) * (1 if bits == 8 else 2) == report["tables"]["packed_bytes"]
    assert report["tables"]["packed_bytes"] == packed_bytes(net.encoding, [kind] * len(runs))
    # the parity gate, at random points, the edges and every pixel centre
    centres = np.stack(np.meshgrid((np.arange(W) + 0.5) / W, (np.arange(H) + 0.5) / H), -1).reshape(-1, 2)
    probe = np.random.default_rng(0).random((3000, 2), dtype=np.float32) * 1.5 - 0.25
    for points in (probe, EDGES, centres.astype(np.float32)):
        assert check_parity(net, onnx_bytes, points, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5
    assert ort_session(onnx_bytes).run(["rgb"], {"coords": probe[:0]})[0].shape == (0, 3)


def test_8bit_tables_keep_their_names_and_the_report_for_reexport():
    net, onnx_bytes, report = stored_model(8, **SHAPES["a native finest level"])
    assert report["tables"]["u8_tables"] == len(net.encoding.tables)
    assert report["tables"]["u8_values"] == net.encoding.entries()
    weights = stored_weights(onnx.load_from_string(onnx_bytes).graph)  # NAME__u8 · __scale + __low, read back
    for level, table in enumerate(net.encoding.tables):
        assert torch.equal(weights[f"encoding.tables.{level}"], table.detach())
    u8 = [i for i in onnx.load_from_string(decoded(onnx_bytes)).graph.initializer if i.data_type == TensorProto.UINT8]
    assert sum(int(np.prod(i.dims)) for i in u8) == net.encoding.entries()


def test_tables_that_are_not_exactly_8bit_or_float16_stay_float32_and_match():
    enc = EncodingConfig(name="grid", image_size=[W, H], grid_levels=4, grid_table_bits=8)
    net = ImageINR(ImageModelConfig(depth=2, width=32, encoding=enc)).eval()
    with torch.no_grad():
        for t in net.encoding.tables:
            t.normal_(0, 0.5)
    plain = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    assert pack_stored(plain, net, 8) == (plain, {})
    onnx_bytes, report = encoding_for(enc).store(enc, net, plain)
    assert report["tables"]["u8_tables"] == 0 and "packed_corners" not in report["tables"]
    probe = np.random.default_rng(1).random((2000, 2), dtype=np.float32) * 1.5 - 0.25
    assert check_parity(net, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5


def test_a_traced_graph_is_left_as_it_is(monkeypatch):
    net, _, _ = stored_model(8, **SHAPES["several levels"])
    monkeypatch.setattr(grid_export, "MAX_PACKED", 3200)  # too large to pack: the traced graph
    plain = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    assert "GridSample" in {n.op_type for n in onnx.load_from_string(plain).graph.node}
    assert pack_stored(plain, net, 8) == (plain, {})


@pytest.mark.parametrize("size", [(1, 1), (2, 3)])
def test_a_flat_or_tiny_grid_stores_each_table_once(size):
    """A constant table equals its own low ([1, F, 1, 1] both on a 1×1 level): still one uint8 table each."""
    enc = EncodingConfig(name="grid", image_size=list(size), grid_levels=4, grid_table_bits=8, grid_finest_features=1)
    net = ImageINR(ImageModelConfig(depth=2, width=32, encoding=enc)).eval()
    with torch.no_grad():
        for t in net.encoding.tables:
            t.fill_(0.25)
    round_tables_8bit(net)
    onnx_bytes, report = encoding_for(enc).store(enc, net, export_onnx(net, torch.rand(8, 2), "coords", ["rgb"]))
    assert report["tables"]["u8_tables"] == len(net.encoding.tables) and "packed_corners" in report["tables"]
    graph = onnx.load_from_string(onnx_bytes).graph
    assert sum(i.data_type == TensorProto.UINT8 for i in graph.initializer) == len(net.encoding.tables)
    probe = np.concatenate([np.random.default_rng(3).random((500, 2), dtype=np.float32) * 1.5 - 0.25, EDGES])
    assert check_parity(net, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5
