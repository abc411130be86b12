"""A version of a network made elsewhere in the runtime (service/engine/foreign.py), on graphs made in the test with
onnx.helper: a half-precision image network is fed its own datatype by V2 and by renders; grey and rgba values
become rgb; a graph's metadata that contradicts the declared size fails the version naming both."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from modelrepo import read_spec
from service.engine.runtime import RuntimeOptions
from service.engine.tasks import runtime_for
from tests.modelrepo.foreign_nets import write_model


def image_graph(dtype: int, channels: int, props: dict | None = None) -> bytes:
    """values = the first coordinate, repeated over `channels` (a Gather of column 0), in `dtype`."""
    x = helper.make_tensor_value_info("p", dtype, ["N", 2])
    y = helper.make_tensor_value_info("v", dtype, ["N", channels])
    cols = helper.make_tensor("cols", TensorProto.INT64, [channels], [0] * channels)
    g = helper.make_graph([helper.make_node("Gather", ["p", "cols"], ["v"], axis=1)], "g", [x], [y], [cols])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in (props or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m.SerializeToString()


def loaded(tmp_path, data: bytes, config: str):
    folder = write_model(tmp_path, "m", data, config)
    runtime = runtime_for(folder, read_spec(folder), 1, RuntimeOptions())
    runtime.load()
    return runtime


@pytest.mark.parametrize("dtype,np_dtype", [(TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)])
def test_a_graph_is_fed_its_own_float_type(tmp_path, dtype, np_dtype):
    config = 'parameters { key: "coordinate_range" value { string_value: "-1,1" } }\n'
    runtime = loaded(tmp_path, image_graph(dtype, 3), config)
    assert runtime.ready, runtime.error
    x = np.array([[0.5, 0.25]], np_dtype)
    assert runtime.predict(x)["v"].dtype == np_dtype  # V2: the graph's own tensors
    rgb = runtime.render_rgb(np.array([[0.75, 0.5]], np.float32))  # x = 0.75 → 0.5 in [-1, 1], a value of 0.5
    assert rgb.dtype == np.float32
    np.testing.assert_allclose(rgb, [[0.5, 0.5, 0.5]], atol=1e-3)


@pytest.mark.parametrize("channels", [1, 4])
def test_grey_and_rgba_values_become_rgb(tmp_path, channels):
    runtime = loaded(
        tmp_path,
        image_graph(TensorProto.FLOAT, channels),
        'parameters { key: "task" value { string_value: "image" } }\n',
    )
    assert runtime.ready, runtime.error
    rgb = runtime.render_rgb(np.array([[0.2, 0.9]], np.float32))
    assert rgb.shape == (1, 3)
    np.testing.assert_allclose(rgb, [[0.2, 0.2, 0.2]], atol=1e-6)


def test_metadata_that_contradicts_the_declared_size_fails_naming_both(tmp_path):
    config = 'parameters { key: "image_width" value { string_value: "40" } }\n'
    config += 'parameters { key: "image_height" value { string_value: "24" } }\n'
    runtime = loaded(tmp_path, image_graph(TensorProto.FLOAT, 3, {"image_width": "32", "image_height": "24"}), config)
    assert not runtime.ready
    assert "32×24" in runtime.error and "40×24" in runtime.error and "image_width" in runtime.error
