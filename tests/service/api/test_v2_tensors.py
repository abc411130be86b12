"""The V2 codec, as pure functions (config.pbtxt: tests/test_modelrepo.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.api.v2.tensors import RequestedOutput, decode, encode_response, parse_request
from service.errors import BadInput


def request(*inputs, **extra) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def test_nested_and_flat_json_data_decode_to_the_same_array():
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    t = {"name": "a", "datatype": "FP32", "shape": [2, 3, 2]}
    flat = parse_request(request({**t, "data": x.ravel().tolist()}), None).inputs[0]
    nested = parse_request(request({**t, "data": x.tolist()}), None).inputs[0]
    assert np.array_equal(decode(flat), x) and np.array_equal(decode(nested), x)
    assert decode(flat).dtype == np.float32


def test_binary_inputs_are_read_in_order_after_the_header():
    a, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([1, -2], np.int64)
    head = request(
        {"name": "a", "datatype": "FP32", "shape": [3, 2], "parameters": {"binary_data_size": a.nbytes}},
        {"name": "j", "datatype": "INT32", "shape": [2], "data": [5, 6]},
        {"name": "b", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": b.nbytes}},
        id="x1",
        outputs=[{"name": "o", "parameters": {"binary_data": True, "classification": 2}}],
    )
    req = parse_request(head + a.tobytes() + b.tobytes(), str(len(head)))
    assert req.id == "x1" and req.outputs == [RequestedOutput("o", True, 2)]
    assert [decode(t).tolist() for t in req.inputs] == [a.tolist(), [5, 6], [1, -2]]


@pytest.mark.parametrize(
    "tensor, message",
    [
        ({"datatype": "INT8", "shape": [2], "data": [1, 300]}, "outside the range of INT8"),
        ({"datatype": "INT32", "shape": [2], "data": [1.5, 2]}, "must hold INT32 numbers"),
        ({"datatype": "BYTES", "shape": [1], "data": ["a"]}, "datatype 'BYTES' is not supported"),
        ({"datatype": "FP32", "shape": [2, -1], "data": [1, 2]}, "shape must be a list of non-negative integers"),
        ({"datatype": "FP32", "shape": [2], "data": [True, False]}, "must hold FP32 numbers"),
    ],
)
def test_json_tensors_that_do_not_fit_their_datatype_or_shape_are_named(tensor, message):
    with pytest.raises(BadInput, match="input 'v'") as e:
        decode(parse_request(request({"name": "v", **tensor}), None).inputs[0])
    assert message in str(e.value)


def test_encode_response_puts_binary_outputs_after_the_json_header():
    logits = np.array([[0.1, 0.7, 0.2]], np.float32)
    body, headers = encode_response(
        "m",
        "1",
        "r",
        [
            (RequestedOutput("p", True), logits),
            (RequestedOutput("q", False), logits),
            (RequestedOutput("c", False, 2), logits),
        ],
    )
    n = int(headers["inference-header-content-length"])
    doc = json.loads(body[:n])
    assert doc["id"] == "r" and doc["outputs"][0]["parameters"]["binary_data_size"] == 12
    assert np.array_equal(np.frombuffer(body[n:], np.float32), logits.ravel())
    assert doc["outputs"][1]["data"] == logits.ravel().tolist()
    assert doc["outputs"][2] == {
        "name": "c",
        "datatype": "BYTES",
        "shape": [1, 2],
        "data": ["0.700000:1", "0.200000:2"],
    }
