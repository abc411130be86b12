"""Entropy-coded tables in the ONNX file (training/encodings/grid_code.py): the decoding nodes compute exactly the
tables numpy decodes (modelrepo/tablecode.py), onnxruntime folds them all at load, the coded file answers bit for bit
as the uncoded one, and `modelrepo.onnxfile.decoded` gives back the uncoded graph, which is what the service loads."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from modelrepo import tablecode
from modelrepo.onnxfile import decoded
from tests.modelrepo.test_tablecode import laplace_table
from training.encodings import EncodingConfig, encoding_for
from training.encodings.grid_code import code_tables, decoder
from training.encodings.grid_quant import round_tables_8bit, store_tables_8bit
from training.encodings.grid_store import pack_stored
from training.export import export_onnx
from training.fp16 import round_weights_fp16
from training.image_models import ImageINR, ImageModelConfig

W, H = 320, 200  # the native level: 64,000 values, coded; the coarser ones too small to gain from it


def session(onnx_bytes: bytes, folded: str | None = None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if folded:
        opts.optimized_model_filepath = folded
    return ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])


def decoded_by_graph(q: np.ndarray) -> np.ndarray:
    """The table as the decoding nodes alone compute it, in onnxruntime."""
    data = tablecode.encode(q)
    nodes, consts = decoder("coded", tablecode.layout(data), "table", "~0/")
    graph = helper.make_graph(
        nodes,
        "decode",
        [],
        [helper.make_tensor_value_info("table", TensorProto.UINT8, list(q.shape))],
        [onnx.numpy_helper.from_array(np.frombuffer(data, np.uint8), "coded"), *consts],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return session(model.SerializeToString()).run(["table"], {})[0]


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 2, 3, 5), (1, 2, 64, 64), (1, 1, 130, 77), (1, 3, 17, 200)])
def test_the_decoding_nodes_compute_what_numpy_decodes(shape):
    for seed in range(2):
        q = laplace_table(shape, seed)
        assert np.array_equal(decoded_by_graph(q), q)


def test_the_decoding_nodes_take_edge_values():
    for q in (
        np.zeros((1, 1, 40, 40), np.uint8),
        np.tile(np.array([0, 255], np.uint8), 800).reshape(1, 2, 20, 40),
        np.arange(256, dtype=np.uint8).repeat(9).reshape(1, 1, 48, 48),
    ):
        assert np.array_equal(decoded_by_graph(q), q)


@pytest.fixture(scope="module")
def stored() -> tuple[bytes, bytes]:
    """(the uncoded file, the coded file) of a native-luma grid model with trained-like 8-bit tables."""
    enc = EncodingConfig(name="grid", image_size=[W, H], grid_levels=4, grid_finest_features=1, grid_table_bits=8)
    net = ImageINR(ImageModelConfig(depth=2, width=32, encoding=enc)).eval()
    with torch.no_grad():
        for level, t in enumerate(net.encoding.tables):
            t.copy_(torch.from_numpy(laplace_table(tuple(t.shape), level).astype(np.float32) / 64 - 2))
    round_weights_fp16(net)
    round_tables_8bit(net)
    exported = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    plain, _ = store_tables_8bit(pack_stored(exported, net, 8)[0], net)
    coded, report = encoding_for(enc).store(enc, net, exported)
    assert report["tables"]["coded_tables"] >= 1 and report["tables"]["coded_bytes"] < report["tables"]["uncoded_bytes"]
    assert coded == code_tables(plain)[0]
    return plain, coded


def test_the_coded_file_is_smaller_valid_opset_17_and_answers_bit_for_bit(stored, tmp_path):
    plain, coded = stored
    assert len(coded) < len(plain)
    model = onnx.load_from_string(coded)
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17
    names = {i.name for i in model.graph.initializer}
    assert "encoding.tables.3__u8__coded" in names and "encoding.tables.3__u8" not in names
    probe = np.random.default_rng(0).random((5000, 2), dtype=np.float32) * 1.2 - 0.1
    expected = session(plain).run(["rgb"], {"coords": probe})[0]
    # a plain onnxruntime (Triton's) runs the decoding nodes itself, once: none is left in the graph it keeps
    folded = tmp_path / "folded.onnx"
    assert np.array_equal(session(coded, str(folded)).run(["rgb"], {"coords": probe})[0], expected)
    kept = {n.op_type for n in onnx.load(str(folded)).graph.node}
    assert not kept & {"BitShift", "CumSum", "ScatterElements", "ScatterND", "TopK", "Range", "ConstantOfShape"}
    assert np.array_equal(session(decoded(coded)).run(["rgb"], {"coords": probe})[0], expected)


def test_decoded_is_the_uncoded_graph(stored):
    plain, coded = stored
    a, b = onnx.load_from_string(decoded(coded)).graph, onnx.load_from_string(plain).graph
    assert [(n.op_type, list(n.input), list(n.output)) for n in a.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in b.node
    ]
    arrays = {i.name: onnx.numpy_helper.to_array(i) for i in a.initializer}
    expected = {i.name: onnx.numpy_helper.to_array(i) for i in b.initializer}
    assert arrays.keys() == expected.keys()
    assert all(np.array_equal(arrays[k], expected[k]) and arrays[k].dtype == expected[k].dtype for k in arrays)
    assert decoded(plain) == plain  # nothing coded: the bytes as they are
