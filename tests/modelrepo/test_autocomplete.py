"""A model folder without metadata.json (modelrepo/autocomplete.py): config.pbtxt completed from the graph as Triton's
onnxruntime backend completes it, and the graphs that cannot be served refused with the model's field named."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from modelrepo import SpecError, read_spec, read_version
from modelrepo.autocomplete import check_external_data
from modelrepo.triton import config_json
from tests.modelrepo.foreign_nets import write_model

IMAGE = 'parameters { key: "task" value { string_value: "image" } }\n'


def graph(inputs, outputs, nodes=None, inits=()) -> bytes:
    """A graph of Identity-like nodes over the given value infos (name, elem type, dims)."""
    ins = [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs]
    outs = [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs]
    if nodes is None:
        nodes = [helper.make_node("Identity", [inputs[0][0]], [o[0]]) for o in outputs] if inputs else []
    g = helper.make_graph(nodes, "g", ins, outs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


F32 = TensorProto.FLOAT


def test_no_config_is_completed_from_the_graph_with_tritons_default_batch(tmp_path):
    write_model(tmp_path, "m", graph([("in", F32, ["N", 5])], [("out", F32, ["N", 5])]), None)
    spec = read_spec(tmp_path / "m")
    assert spec.task == "generic" and spec.max_batch_size == 4 and spec.max_queue_delay_us == 0
    assert [t.to_json() for t in spec.inputs] == [{"name": "in", "datatype": "FP32", "shape": [-1, 5]}]
    cfg = config_json(spec)
    assert cfg["input"][0]["dims"] == [5] and cfg["output"][0]["name"] == "out" and "dynamic_batching" in cfg
    record = read_version(tmp_path / "m", 1)
    assert not record.recorded and len(record.onnx_sha256) == 64  # the file's own digest


def test_a_partial_config_keeps_what_it_says_and_gets_the_rest(tmp_path):
    config = 'max_batch_size: 32\nversion_policy: { all { } }\ninput { name: "in" }\n'
    config += 'parameters { key: "access" value { string_value: "restricted" } }\n'
    write_model(
        tmp_path, "m", graph([("in", TensorProto.INT64, ["N", 3])], [("out", TensorProto.INT64, ["N", 3])]), config
    )
    spec = read_spec(tmp_path / "m")
    assert spec.max_batch_size == 32 and spec.version_policy.kind == "all" and spec.access.kind == "restricted"
    assert spec.inputs[0].datatype == "INT64" and spec.outputs[0].shape == (-1, 3)


def test_an_image_convention_makes_an_image_model_with_its_native_grid(tmp_path):
    config = IMAGE + 'parameters { key: "image_width" value { string_value: "64" } }\n'
    config += 'parameters { key: "image_height" value { string_value: "32" } }\n'
    write_model(tmp_path, "m", graph([("p", F32, ["N", 2])], [("v", F32, ["N", 4])]), config)
    spec = read_spec(tmp_path / "m")
    assert spec.task == "image" and spec.max_batch_size == 262_144 and spec.convention.native == (64, 32)
    assert spec.metadata["source"] == {"size": [64, 32]}


@pytest.mark.parametrize(
    "inputs,outputs,config,words",
    [
        ([], [("out", F32, ["N", 3])], None, ["has no inputs", "config.pbtxt input"]),
        (
            [("x", F32, ["N", 1]), ("y", F32, ["N", 1])],
            [("out", F32, ["N", 3])],
            IMAGE,
            ["config.pbtxt input", "2 inputs (x, y)", "[N, 2]"],
        ),
        (
            [("x", F32, ["N", "len"])],
            [("out", F32, ["N", "len"])],
            None,
            ["input 'x'", "[-1, -1]", "every other dimension"],
        ),
        (
            [("x", F32, ["N", 2])],
            [("out", F32, ["N", 5])],
            IMAGE,
            ["output 'out'", "[N, 1], [N, 3] or [N, 4]", "[-1, 5]"],
        ),
        ([("x", F32, ["N", 3])], [("out", F32, ["N", 3])], IMAGE, ["input 'x'", "[N, 2]"]),
        ([("x", F32, [1, 2])], [("out", F32, [1, 3])], IMAGE, ["max_batch_size", "fixed first dimension"]),
        (
            [("x", F32, ["N", 2])],
            [("out", F32, ["N", 3])],
            'input { name: "coords" data_type: TYPE_FP32 dims: [ 2 ] }\n',
            ["config.pbtxt input 'coords'", "no input of that name"],
        ),
        (
            [("x", F32, ["N", 2])],
            [("out", F32, ["N", 3])],
            'parameters { key: "coordinate_order" value { string_value: "zx" } }\n',
            ["coordinate_order", "xy or yx"],
        ),
        (
            [("x", F32, ["N", 2])],
            [("out", F32, ["N", 3])],
            'parameters { key: "pixel_grid" value { string_value: "corners" } }\n',
            ["pixel_grid", "image_width and image_height"],
        ),
        (
            [("x", F32, ["N", 2])],
            [("out", F32, ["N", 3])],
            'parameters { key: "image_width" value { string_value: "0" } }\n',
            ["image_width", "from 1 to"],
        ),
        ([("x", F32, ["N", 2])], [("out", F32, ["N", 3])], 'platform: "pytorch_libtorch"\n', ["platform"]),
    ],
)
def test_graphs_that_cannot_be_served_are_refused_naming_the_field(tmp_path, inputs, outputs, config, words):
    nodes = [helper.make_node("Constant", [], ["out"], value=helper.make_tensor("c", F32, [1, 3], [0, 0, 0]))]
    write_model(tmp_path, "m", graph(inputs, outputs, nodes=None if inputs else nodes), config)
    with pytest.raises(SpecError) as e:
        read_spec(tmp_path / "m")
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    def with_external(location: str) -> bytes:
        w = TensorProto(name="w", data_type=F32, dims=[2, 3], data_location=TensorProto.EXTERNAL)
        w.external_data.add(key="location", value=location)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        return graph([("x", F32, ["N", 2])], [("y", F32, ["N", 3])], nodes=nodes, inits=[w])

    folder = write_model(tmp_path, "m", with_external("weights.bin"), None)
    check_external_data(folder / "1" / "model.onnx", folder)  # beside it: fine
    for bad in ("../../secret.bin", "/etc/passwd", ""):
        (folder / "1" / "model.onnx").write_bytes(with_external(bad))
        with pytest.raises(SpecError, match="outside the model folder"):
            check_external_data(folder / "1" / "model.onnx", folder)
    constant = TensorProto(name="c", data_type=F32, dims=[1, 3], data_location=TensorProto.EXTERNAL)
    constant.external_data.add(key="location", value="../../x.bin")
    inner = helper.make_graph([helper.make_node("Constant", [], ["y"], value=constant)], "then", [], [])
    cond = helper.make_node("If", ["c0"], ["y"], then_branch=inner, else_branch=inner)
    (folder / "1" / "model.onnx").write_bytes(graph([("c0", TensorProto.BOOL, [])], [("y", F32, [1, 3])], nodes=[cond]))
    with pytest.raises(SpecError, match="'c' keeps its data in '../../x.bin'"):  # a Constant in a subgraph too
        check_external_data(folder / "1" / "model.onnx", folder)
    (tmp_path / "m" / "1" / "link.bin").symlink_to("/etc/passwd")
    (folder / "1" / "model.onnx").write_bytes(with_external("link.bin"))
    with pytest.raises(SpecError, match="'link.bin', outside"):
        check_external_data(folder / "1" / "model.onnx", folder)


def test_our_own_models_keep_their_checks(tmp_path):
    """A model with metadata.json still needs each version's N/metadata.json (its sha256 is checked)."""
    write_model(tmp_path, "m", graph([("coords", F32, ["N", 2])], [("rgb", F32, ["N", 3])]), None)
    (tmp_path / "m" / "metadata.json").write_text(
        '{"task": "image", "inputs": [{"name": "coords", "datatype": "FP32", "shape": [-1, 2]}],'
        ' "outputs": [{"name": "rgb", "datatype": "FP32", "shape": [-1, 3]}]}'
    )
    assert read_spec(tmp_path / "m").convention is None
    with pytest.raises(SpecError, match="missing 1/metadata.json"):
        read_version(tmp_path / "m", 1)
