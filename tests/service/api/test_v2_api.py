"""The V2 inference protocol over HTTP, spoken by a real client (tritonclient) to the real server."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def tc(server):
    c = triton.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=30.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def digits_x():
    return np.random.default_rng(7).random((5, 1, 28, 28), dtype=np.float32)


def infer_input(name: str, x: np.ndarray, datatype: str = "FP32", binary: bool = True) -> triton.InferInput:
    t = triton.InferInput(name, list(x.shape), datatype)
    t.set_data_from_numpy(x, binary_data=binary)
    return t


def error_of(call) -> tuple[int, str]:
    with pytest.raises(InferenceServerException) as e:
        call()
    return int(e.value.status()), e.value.message()


def test_health_is_live_and_ready_and_models_report_readiness(tc):
    assert tc.is_server_live() and tc.is_server_ready()
    assert tc.is_model_ready("digits") and tc.is_model_ready("astronaut", "1")
    assert not tc.is_model_ready("tampered") and not tc.is_model_ready("no-such-model")


def test_health_routes_answer_json_with_triton_status_codes(client):
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    r = client.get("/v2/models/tampered/ready")
    assert r.status_code == 400 and "tampered" in r.json()["error"] and "sha256" in r.json()["error"]
    r = client.get("/v2/models/truncated-config/ready")  # a model-level failure: no version was loaded
    assert r.status_code == 400 and "config.pbtxt does not parse" in r.json()["error"]
    r = client.get("/v2/models/no-inputs/versions/1/config")
    assert r.status_code == 404 and "versions: none" in r.json()["error"]
    assert client.get("/v2/models/digits/versions/7/ready").status_code == 404


def test_server_metadata_lists_the_extensions(tc):
    meta = tc.get_server_metadata()
    assert meta["name"] == "inr-serve"
    assert {"binary_tensor_data", "statistics", "model_configuration"} <= set(meta["extensions"])


def test_model_metadata_gives_tensors_with_v2_datatypes(tc):
    meta = tc.get_model_metadata("digits")
    assert meta["versions"] == ["1"] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "images", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    assert [o["name"] for o in meta["outputs"]] == ["logits", "probabilities"]
    assert tc.get_model_metadata("astronaut", "1")["inputs"][0]["shape"] == [-1, 2]


def test_model_config_is_the_spec_as_triton_json(tc, model_repo):
    cfg = tc.get_model_config("digits")
    pbtxt = (model_repo / "digits" / "config.pbtxt").read_text()
    delay = int(pbtxt.split("max_queue_delay_microseconds:")[1].split()[0])
    assert cfg["max_batch_size"] == 256 and cfg["platform"] == "onnxruntime_onnx"
    assert (
        cfg["input"][0].items()
        >= {
            "name": "images",
            "data_type": "TYPE_FP32",
            "dims": [1, 28, 28],
            "format": "FORMAT_NONE",
            "is_shape_tensor": False,
            "optional": False,
        }.items()
    )
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == delay
    image = tc.get_model_config("astronaut")
    assert image["max_batch_size"] == 262_144 and image["input"][0]["dims"] == [2]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_digits_equals_v1_classify(tc, client, digits_x, binary):
    outputs = [
        triton.InferRequestedOutput("probabilities", binary_data=binary),
        triton.InferRequestedOutput("logits", binary_data=binary),
    ]
    r = tc.infer("digits", [infer_input("images", digits_x, binary=binary)], outputs=outputs, request_id="req-7")
    assert r.get_response()["id"] == "req-7"
    v1 = client.post("/v1/models/digits/classify", json={"images": digits_x[:, 0].tolist()}).json()
    probs = r.as_numpy("probabilities")
    assert probs.shape == (5, 10) and probs.dtype == np.float32
    np.testing.assert_allclose(probs, [p["probabilities"] for p in v1["predictions"]], atol=2e-6)
    assert list(r.as_numpy("logits").argmax(1)) == [p["label"] for p in v1["predictions"]]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_image_equals_v1_query(tc, client, binary):
    coords = np.random.default_rng(3).random((40, 2), dtype=np.float32)
    r = tc.infer(
        "astronaut",
        [infer_input("coords", coords, binary=binary)],
        outputs=[triton.InferRequestedOutput("rgb", binary_data=binary)],
    )
    v1 = client.post("/v1/models/astronaut/query", json={"coords": coords.tolist()}).json()
    np.testing.assert_allclose(r.as_numpy("rgb"), v1["rgb"], atol=2e-6)


def test_infer_json_accepts_nested_and_flat_data_and_returns_every_output(client, digits_x):
    flat = {
        "inputs": [{"name": "images", "datatype": "FP32", "shape": [5, 1, 28, 28], "data": digits_x.ravel().tolist()}]
    }
    nested = {"id": "n", "inputs": [{**flat["inputs"][0], "data": digits_x.tolist()}]}
    a, b = (
        client.post("/v2/models/digits/infer", json=flat),
        client.post("/v2/models/digits/versions/1/infer", json=nested),
    )
    assert a.status_code == b.status_code == 200 and a.headers["content-type"] == "application/json"
    assert "id" not in a.json() and b.json()["id"] == "n"
    assert [o["name"] for o in a.json()["outputs"]] == ["logits", "probabilities"]
    assert a.json()["outputs"] == b.json()["outputs"]
    assert a.json()["outputs"][1]["shape"] == [5, 10] and len(a.json()["outputs"][1]["data"]) == 50


def test_infer_without_outputs_sends_every_output_binary_and_gzip_requests_work(tc, digits_x):
    # tritonclient asks for binary_data_output on the whole request when no outputs are named
    r = tc.infer("digits", [infer_input("images", digits_x)], request_compression_algorithm="gzip")
    assert {o["name"]: o["parameters"]["binary_data_size"] for o in r.get_response()["outputs"]} == {
        "logits": 5 * 10 * 4,
        "probabilities": 5 * 10 * 4,
    }
    assert r.as_numpy("probabilities").shape == (5, 10)


def test_infer_classification_extension_gives_top_k_classes(tc, digits_x):
    r = tc.infer(
        "digits",
        [infer_input("images", digits_x)],
        outputs=[triton.InferRequestedOutput("probabilities", class_count=3)],
    )
    top = r.as_numpy("probabilities")
    assert top.shape == (5, 3)
    probs = tc.infer("digits", [infer_input("images", digits_x)]).as_numpy("probabilities")
    for row, p in zip(top, probs):
        scores = [float(s.decode().split(":")[0]) for s in row]
        labels = [int(s.decode().split(":")[1]) for s in row]
        assert labels == list(np.argsort(-p)[:3]) and scores == sorted(scores, reverse=True)


def test_infer_empty_batch_returns_empty_outputs(client):
    r = client.post(
        "/v2/models/digits/infer",
        json={"inputs": [{"name": "images", "datatype": "FP32", "shape": [0, 1, 28, 28], "data": []}]},
    )
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [0, 10]


@pytest.mark.parametrize(
    "name, shape, datatype, expect",
    [
        ("images", [5, 784], "FP32", "unexpected shape for input 'images'"),
        ("images", [5, 1, 28, 28], "FP64", "data-type is 'FP64', but model 'digits' expects 'FP32'"),
        ("pixels", [5, 1, 28, 28], "FP32", "unexpected inference input 'pixels'"),
    ],
)
def test_infer_mismatch_is_a_400_naming_it(tc, digits_x, name, shape, datatype, expect):
    x = digits_x.reshape(shape).astype(np.float64 if datatype == "FP64" else np.float32)
    code, message = error_of(lambda: tc.infer("digits", [infer_input(name, x, datatype)]))
    assert code == 400 and expect in message


def test_infer_unknown_output_model_and_version_are_named(tc, digits_x):
    x = [infer_input("images", digits_x)]
    code, msg = error_of(lambda: tc.infer("digits", x, outputs=[triton.InferRequestedOutput("rgb")]))
    assert code == 400 and "unexpected inference output 'rgb'" in msg and "probabilities" in msg
    code, msg = error_of(lambda: tc.infer("nope", x))
    assert code == 404 and "unknown model 'nope'" in msg
    code, msg = error_of(lambda: tc.infer("digits", x, model_version="2"))
    assert code == 404 and "unknown version 2" in msg
    code, msg = error_of(lambda: tc.get_model_metadata("digits", "latest"))
    assert code == 400 and "version 'latest'" in msg
    code, msg = error_of(lambda: tc.infer("tampered", [infer_input("coords", np.zeros((1, 2), np.float32))]))
    assert code == 503 and "tampered" in msg


def post(client, body: bytes, headers: dict | None = None, model: str = "digits"):
    return client.post(f"/v2/models/{model}/infer", content=body, headers=headers or {})


def binary_request(
    x: np.ndarray, size: int | None = None, header: str | None = None, name: str = "images", extra: bytes = b""
) -> tuple[bytes, dict]:
    """A binary-extension body: JSON header claiming `size` bytes for `x`, then the bytes of `x`."""
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes if size is None else size},
                }
            ]
        }
    ).encode()
    return head + x.tobytes() + extra, {"Inference-Header-Content-Length": header or str(len(head))}


@pytest.mark.parametrize(
    "case, expect",
    [
        ("not json", "not valid JSON"),
        ("no inputs", "inputs must be a non-empty list"),
        ("ragged", "ragged"),
        ("strings", "must hold FP32 numbers"),
        ("count", "has 3 values but shape [1, 1, 28, 28] needs 784"),
        ("nan", "contains NaN or Inf"),
        ("no data", "neither data nor parameters.binary_data_size"),
        ("bytes short", "does not fit"),
        ("bytes left", "belong to no input"),
        ("bad header", "Inference-Header-Content-Length"),
        ("size mismatch", "binary bytes do not match shape"),
    ],
)
def test_bad_infer_bodies_are_400s_that_name_the_problem(client, case, expect):
    x = np.zeros((1, 1, 28, 28), np.float32)
    tensor = {"name": "images", "datatype": "FP32", "shape": [1, 1, 28, 28]}
    bodies = {
        "not json": (b"{inputs", {}),
        "no inputs": (b'{"inputs": []}', {}),
        "ragged": (json.dumps({"inputs": [{**tensor, "data": [[1, 2], [3]]}]}).encode(), {}),
        "strings": (json.dumps({"inputs": [{**tensor, "data": ["a"] * 784}]}).encode(), {}),
        "count": (json.dumps({"inputs": [{**tensor, "data": [0, 0, 0]}]}).encode(), {}),
        "nan": (json.dumps({"inputs": [{**tensor, "data": [float("nan")] * 784}]}).encode(), {}),
        "no data": (json.dumps({"inputs": [tensor]}).encode(), {}),
        "bytes short": binary_request(x, size=x.nbytes + 4),
        "bytes left": binary_request(x, extra=b"\0\0\0\0"),
        "bad header": binary_request(x, header="-5"),
        "size mismatch": binary_request(x.ravel()[:-1], size=x.nbytes - 4),
    }
    body, headers = bodies[case]
    if case == "size mismatch":  # the header claims the full shape, the bytes are one value short
        body = body.replace(b"[783]", b"[1, 1, 28, 28]")
        headers = {"Inference-Header-Content-Length": str(body.index(b"}}]}") + 4)}
    r = post(client, body, headers)
    assert r.status_code == 400, r.text
    assert expect in r.json()["error"]
    assert client.get("/v2/health/live").status_code == 200


def test_too_many_rows_and_gzip_bombs_are_413(client):
    coords = np.zeros((5001, 2), np.float32)  # the server fixture allows 5000 coords per query
    r = post(client, *binary_request(coords, name="coords"), model="astronaut")
    assert r.status_code == 413 and "INR_MAX_QUERY_COORDS" in r.json()["error"]
    bomb = gzip.compress(b"{" + b" " * 3_000_000 + b"}")  # the server fixture allows 2 MB bodies
    r = post(client, bomb, {"Content-Encoding": "gzip"})
    assert r.status_code == 413 and "inflates" in r.json()["error"]
    r = post(client, b"{}", {"Content-Encoding": "br"})
    assert r.status_code == 400 and "Content-Encoding 'br'" in r.json()["error"]


def test_statistics_count_inferences_per_model(tc, digits_x):
    before = tc.get_inference_statistics("digits")["model_stats"][0]
    tc.infer("digits", [infer_input("images", digits_x)])
    after = tc.get_inference_statistics("digits")["model_stats"][0]
    assert after["inference_count"] == before["inference_count"] + 5
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["execution_count"] >= before["execution_count"] + 1 and after["last_inference"] > 0
    assert {s["name"] for s in tc.get_inference_statistics()["model_stats"]} == {"digits", "astronaut"}
