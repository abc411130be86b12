"""Models this project did not make (issue 56), in a repository of plain Triton model folders (config.pbtxt and
N/model.onnx, no metadata.json), served by the real server on free ports: a SIREN and a Fourier-feature MLP built from
their papers' definitions and exported by torch with their own tensor names, and a generic classifier. V2 infer over
HTTP and gRPC (tritonclient) equals onnxruntime on the same file; the image ones query, render and tile over IIIF as
the network evaluated on the declared pixel grid; the config is the completed one; broken graphs fail alone."""

from __future__ import annotations

import io

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import torch
import tritonclient.grpc as tg
import tritonclient.http as th
from onnx import TensorProto, helper
from PIL import Image

from tests.modelrepo import foreign_nets as F
from tests.servers import Server

torch.set_num_threads(1)
W, H = 40, 24  # the SIREN's declared native grid


def broken_graphs() -> dict[str, tuple[bytes, str]]:
    """name → (ONNX bytes, config.pbtxt) of graphs that must fail alone, each with its reason."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    image = 'parameters { key: "task" value { string_value: "image" } }\n'

    def model(nodes, inputs, outputs, inits=(), props=None) -> bytes:
        m = helper.make_model(
            helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[helper.make_opsetid("", 17)]
        )
        for k, v in (props or {}).items():
            m.metadata_props.add(key=k, value=v)
        return m.SerializeToString()

    five = helper.make_tensor("five", TensorProto.FLOAT, [1, 3], [5.0, 5.0, 5.0])
    cols = helper.make_tensor("cols", TensorProto.INT64, [3], [0, 1, 1])
    nan = model(
        [
            helper.make_node("Gather", ["x", "cols"], ["x3"], axis=1),
            helper.make_node("Sub", ["x3", "five"], ["neg"]),
            helper.make_node("Log", ["neg"], ["y"]),
        ],
        [x],
        [y],
        [five, cols],
    )
    unknown = model([helper.make_node("NoSuchOp", ["x"], ["y"])], [x], [y])
    outside = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    outside.data_location = TensorProto.EXTERNAL
    outside.external_data.add(key="location", value="../../../etc/passwd")
    escapes = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [outside])
    ok = model([helper.make_node("Gather", ["x", "cols"], ["y"], axis=1)], [x], [y], [cols])
    contradicts = model(
        [helper.make_node("Gather", ["x", "cols"], ["y"], axis=1)],
        [x],
        [y],
        [cols],
        {"image_width": "32", "image_height": "24"},
    )
    declared = image + 'parameters { key: "image_width" value { string_value: "40" } }\n'
    declared += 'parameters { key: "image_height" value { string_value: "24" } }\n'
    return {
        "nan-output": (nan, image),
        "unknown-op": (unknown, image),
        "external-outside": (escapes, image),
        "wrong-dims": (ok, image + 'input { name: "x" data_type: TYPE_FP32 dims: [ 3 ] }\n'),
        "geometry-contradicts": (contradicts, declared),
        "bad-range": (ok, 'parameters { key: "coordinate_range" value { string_value: "1,-1" } }\n'),
    }


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    repo = tmp_path_factory.mktemp("foreign")
    files = {"siren": F.siren_onnx(), "fourier": F.fourier_onnx(), "classifier": F.classifier_onnx()}
    F.write_model(repo, "siren", files["siren"], F.SIREN_CONFIG)
    F.write_model(repo, "fourier", files["fourier"], F.FOURIER_CONFIG)
    torch.manual_seed(4)
    files["classifier-2"] = F.export(F.Classifier(), torch.zeros(4, 8), "features", "scores")
    F.write_model(repo, "classifier", files["classifier"], F.CLASSIFIER_CONFIG + "version_policy: { all { } }\n")
    F.write_model(repo, "classifier", files["classifier-2"], None, version=2)
    F.write_model(repo, "plain", files["classifier"], None)  # no config.pbtxt at all: completed from the graph
    private = F.SIREN_CONFIG + 'parameters { key: "access" value { string_value: "restricted" } }\n'
    F.write_model(repo, "siren-private", files["siren"], private)
    for name, (data, config) in broken_graphs().items():
        F.write_model(repo, name, data, config)
    srv = Server(repo, env={"INR_MODEL_LOADING": "startup", "INR_RESPONSE_CACHE_BYTES": "0"})
    with srv.running():
        yield srv, repo, files


def ort_run(data: bytes, x: np.ndarray, inp: str, out: str) -> np.ndarray:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run([out], {inp: x})[0]


@pytest.mark.parametrize(
    "name,file,inp,out,x",
    [
        ("siren", "siren", "model_input", "model_output", np.random.default_rng(0).uniform(-1, 1, (37, 2))),
        ("fourier", "fourier", "x", "y", np.random.default_rng(1).uniform(0, 1, (37, 2))),
        ("classifier", "classifier-2", "features", "scores", np.random.default_rng(2).normal(size=(3, 8))),
        ("plain", "classifier", "features", "scores", np.random.default_rng(3).normal(size=(4, 8))),
    ],
)
def test_v2_infer_over_http_and_grpc_equals_onnxruntime_on_the_same_file(foreign, name, file, inp, out, x):
    srv, _, files = foreign
    x = x.astype(np.float32)
    want = ort_run(files[file], x, inp, out)
    h = th.InferenceServerClient(srv.url.removeprefix("http://"))
    t = th.InferInput(inp, list(x.shape), "FP32")
    t.set_data_from_numpy(x, binary_data=True)
    got = h.infer(name, [t]).as_numpy(out)
    np.testing.assert_array_equal(got, want)
    g = tg.InferenceServerClient(srv.grpc_url)
    gt = tg.InferInput(inp, list(x.shape), "FP32")
    gt.set_data_from_numpy(x)
    np.testing.assert_array_equal(g.infer(name, [gt]).as_numpy(out), want)
    g.close()


def test_versions_batching_and_statistics_come_from_the_config(foreign):
    srv, _, files = foreign
    x = np.random.default_rng(5).normal(size=(2, 8)).astype(np.float32)
    h = th.InferenceServerClient(srv.url.removeprefix("http://"))
    for version, file in (("1", "classifier"), ("2", "classifier-2")):
        t = th.InferInput("features", [2, 8], "FP32")
        t.set_data_from_numpy(x)
        got = h.infer("classifier", [t], model_version=version).as_numpy("scores")
        np.testing.assert_array_equal(got, ort_run(files[file], x, "features", "scores"))
    cfg = h.get_model_config("classifier")
    assert cfg["max_batch_size"] == 16 and cfg["version_policy"] == {"all": {}}
    assert cfg["input"][0]["name"] == "features" and cfg["input"][0]["dims"] == [8]
    plain = h.get_model_config("plain")  # no config.pbtxt: Triton's auto-complete, its default batch of 4
    assert plain["max_batch_size"] == 4 and "dynamic_batching" in plain and plain["output"][0]["dims"] == [4]
    stats = h.get_inference_statistics("classifier")["model_stats"]
    assert sum(int(s["inference_count"]) for s in stats) >= 2
    big = np.zeros((17, 8), np.float32)
    t = th.InferInput("features", [17, 8], "FP32")
    t.set_data_from_numpy(big)
    with pytest.raises(Exception, match="max_batch_size"):
        h.infer("classifier", [t])
    wrong = httpx.post(f"{srv.url}/v1/models/classifier/query", json={"coords": [[0.5, 0.5]]})
    assert 400 <= wrong.status_code < 500 and "generic" in wrong.json()["error"], wrong.text
    cfg = httpx.get(f"{srv.url}/v2/models/siren/config").json()
    assert cfg["parameters"]["coordinate_range"]["string_value"] == "-1,1"
    assert cfg["parameters"]["image_width"]["string_value"] == "40" and cfg["max_batch_size"] == 262144


def siren_pixels(files) -> np.ndarray:
    """The SIREN evaluated on its own grid (get_mgrid, y first), as the render's 8-bit pixels [H, W, 3]."""
    v = ort_run(files["siren"], F.siren_grid(W, H), "model_input", "model_output")
    return np.rint(np.clip((v + 1) / 2, 0, 1) * 255).reshape(H, W, 3)


def fourier_pixels(files, w: int, h: int) -> np.ndarray:
    v = ort_run(files["fourier"], F.centre_grid(w, h), "x", "y")
    return np.rint(np.clip(np.repeat(v, 3, 1), 0, 1) * 255).reshape(h, w, 3)


def png(resp: httpx.Response) -> np.ndarray:
    assert resp.status_code == 200, resp.text
    return np.asarray(Image.open(io.BytesIO(resp.content)).convert("RGB")).astype(np.float64)


def test_image_networks_render_and_tile_as_evaluated_on_the_declared_grid(foreign):
    srv, _, files = foreign
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        info = c.get("/v1/models/siren").json()
        assert info["task"] == "image" and (info["width"], info["height"]) == (W, H)
        want = siren_pixels(files)
        render = png(c.get("/v1/models/siren/render", params={"width": W}))
        assert render.shape == (H, W, 3) and F.psnr(render / 255, want / 255) >= 60
        tile = png(c.get("/iiif/3/siren/8,4,16,12/max/0/default.png"))
        assert F.psnr(tile / 255, want[4:16, 8:24] / 255) >= 60
        iiif = c.get("/iiif/3/siren/info.json").json()
        assert (iiif["width"], iiif["height"]) == (W, H)
        manifest = c.get("/iiif/3/siren/manifest.json").json()
        assert (manifest["items"][0]["width"], manifest["items"][0]["height"]) == (W, H)
        grey = png(c.get("/v1/models/fourier/render", params={"width": 32, "height": 32}))
        assert F.psnr(grey / 255, fourier_pixels(files, 32, 32) / 255) >= 60
        pts = F.centre_grid(8, 8)
        q = c.post("/v1/models/fourier/query", json={"coords": pts.tolist()})
        assert q.status_code == 200, q.text
        v = ort_run(files["fourier"], pts, "x", "y")
        np.testing.assert_allclose(np.asarray(q.json()["rgb"]), np.repeat(v, 3, 1), atol=1e-6)


def test_the_access_policy_holds_for_a_model_made_elsewhere(foreign):
    srv, _, _ = foreign
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/v1/models/siren-private/render", params={"width": 8}).status_code in (401, 403)
        assert c.get("/iiif/3/siren-private/full/8,/0/default.png").status_code in (401, 403)
        body = {"inputs": [{"name": "model_input", "datatype": "FP32", "shape": [1, 2], "data": [0, 0]}]}
        assert c.post("/v2/models/siren-private/infer", json=body).status_code in (401, 403)
        assert "siren-private" not in c.get("/v1/models").text


@pytest.mark.parametrize(
    "name,words",
    [
        ("nan-output", ["nan-output", "output 'y'", "NaN"]),
        ("unknown-op", ["NoSuchOp"]),
        ("external-outside", ["external_data location", "'w'", "outside the model folder"]),
        ("wrong-dims", ["config.pbtxt input 'x'", "dims [3]", "[2]"]),
        ("geometry-contradicts", ["32×24", "image_width"]),
        ("bad-range", ["coordinate_range", "LO < HI"]),
    ],
)
def test_a_broken_graph_fails_alone_naming_the_model_and_the_field(foreign, name, words):
    srv, _, _ = foreign
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        info = c.get(f"/v1/models/{name}").json()
        reason = " ".join(
            filter(None, [info.get("error") or ""] + [v.get("error") or "" for v in info.get("versions", [])])
        )
        assert info.get("status") != "ready" or any(v["status"] == "failed" for v in info["versions"]), info
        for w in words:
            assert w in reason, (w, reason)
        r = c.get(f"/v1/models/{name}/render", params={"width": 8})
        assert r.status_code in (404, 409, 503) and "error" in r.json()
        assert c.get("/v1/models/siren/render", params={"width": 8}).status_code == 200
