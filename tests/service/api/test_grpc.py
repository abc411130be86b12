"""KServe V2 over gRPC, spoken by tritonclient.grpc to the real server (the session's `server`, its own free gRPC
port): health, metadata, config, statistics, infer on both models with typed and raw contents, async and stream
infer, the grpc.health.v1 service, and the answers agreeing with HTTP's for the same tensors."""

from __future__ import annotations

import asyncio
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.grpc.aio as tga
import tritonclient.http as th
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.engine.preprocess import mnist_like
from tests.servers import draw_digit


@pytest.fixture(scope="module")
def gc(server):
    c = tg.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def digits_x():
    """A drawn 3 and a drawn 7, MNIST-like, as the digits model takes them."""
    return np.stack([mnist_like(draw_digit(d)) for d in (3, 7)])[:, None].astype(np.float32)


def grpc_input(name: str, x: np.ndarray, raw: bool = True) -> tg.InferInput:
    t = tg.InferInput(name, list(x.shape), "FP32")
    if raw:
        t.set_data_from_numpy(x)  # raw_input_contents
    else:
        t._get_tensor().contents.fp32_contents.extend(
            x.ravel().tolist()
        )  # typed contents, as Triton's C++ clients send
    return t


def test_health_calls_and_the_grpc_health_service(gc, server):
    assert gc.is_server_live() and gc.is_server_ready()
    assert gc.is_model_ready("digits") and gc.is_model_ready("astronaut", "1")
    assert not gc.is_model_ready("tampered") and not gc.is_model_ready("no-such-model")
    with grpc.insecure_channel(server.grpc_url) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "inference.GRPCInferenceService"):
            assert (
                stub.Check(health_pb2.HealthCheckRequest(service=service)).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        with pytest.raises(grpc.RpcError) as e:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_server_and_model_metadata_match_http(gc, server):
    meta = gc.get_server_metadata(as_json=True)
    assert meta["name"] == "inr-serve" and "model_repository" in meta["extensions"]
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    for name in ("digits", "astronaut"):
        m = gc.get_model_metadata(name, as_json=True)
        h = http.get_model_metadata(name)
        assert m["name"] == name and m["versions"] == h["versions"] and m["platform"] == "onnxruntime_onnx"
        assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in m["inputs"]] == [
            (t["name"], t["datatype"], t["shape"]) for t in h["inputs"]
        ]
    http.close()


def test_model_config_is_tritons_message(gc):
    cfg = gc.get_model_config("digits").config
    assert cfg.name == "digits" and cfg.max_batch_size == 256 and cfg.platform == "onnxruntime_onnx"
    assert [i.name for i in cfg.input] == ["images"] and list(cfg.input[0].dims) == [1, 28, 28]
    assert {o.name for o in cfg.output} == {"logits", "probabilities"}
    assert gc.get_model_config("astronaut", "1").config.input[0].name == "coords"


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "typed"])
def test_infer_digits_classifies_drawn_digits_like_http(gc, server, digits_x, raw):
    r = gc.infer(
        "digits",
        [grpc_input("images", digits_x, raw)],
        request_id="d1",
        outputs=[tg.InferRequestedOutput("probabilities")],
    )
    p = r.as_numpy("probabilities")
    assert r.get_response().id == "d1" and r.get_response().model_version == "1"
    assert p.shape == (2, 10) and np.allclose(p.sum(1), 1, atol=1e-4)
    assert list(p.argmax(1)) == [3, 7]
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    x = th.InferInput("images", list(digits_x.shape), "FP32")
    x.set_data_from_numpy(digits_x)
    assert np.array_equal(http.infer("digits", [x]).as_numpy("probabilities"), p)
    http.close()


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "typed"])
def test_infer_astronaut_returns_rgb_for_each_coordinate(gc, raw):
    coords = np.random.default_rng(3).random((300, 2), dtype=np.float32)
    rgb = gc.infer("astronaut", [grpc_input("coords", coords, raw)], model_version="1").as_numpy("rgb")
    assert rgb.shape == (300, 3) and rgb.dtype == np.float32 and np.isfinite(rgb).all()
    again = gc.infer("astronaut", [grpc_input("coords", coords[:10], raw)]).as_numpy("rgb")
    assert np.allclose(again, rgb[:10], atol=1e-6)


def test_classification_output_comes_back_as_bytes(gc, digits_x):
    r = gc.infer(
        "digits", [grpc_input("images", digits_x)], outputs=[tg.InferRequestedOutput("probabilities", class_count=2)]
    )
    top = r.as_numpy("probabilities")
    assert top.shape == (2, 2) and top[0, 0].decode().endswith(":3") and top[1, 0].decode().endswith(":7")


def test_async_infer_and_stream_infer(gc, server, digits_x):
    done: queue.Queue = queue.Queue()
    gc.async_infer("digits", [grpc_input("images", digits_x)], callback=lambda result, error: done.put((result, error)))
    result, error = done.get(timeout=30)
    assert error is None and list(result.as_numpy("probabilities").argmax(1)) == [3, 7]

    answers: queue.Queue = queue.Queue()
    stream = tg.InferenceServerClient(server.grpc_url)
    stream.start_stream(callback=lambda result, error: answers.put((result, error)))
    for i in range(4):
        stream.async_stream_infer("digits", [grpc_input("images", digits_x[i % 2 : i % 2 + 1])], request_id=str(i))
    stream.async_stream_infer("no-such-model", [grpc_input("images", digits_x)], request_id="bad")
    got = [answers.get(timeout=30) for _ in range(5)]
    stream.stop_stream()
    stream.close()
    ok = {r.get_response().id: int(r.as_numpy("probabilities").argmax()) for r, e in got if e is None}
    assert ok == {"0": 3, "1": 7, "2": 3, "3": 7}
    errors = [e for r, e in got if e is not None]
    assert len(errors) == 1 and "unknown model 'no-such-model'" in errors[0].message()


def test_the_asyncio_client(server, digits_x):
    async def go():
        async with tga.InferenceServerClient(server.grpc_url) as c:
            assert await c.is_server_ready()
            results = await asyncio.gather(*[c.infer("digits", [grpc_input("images", digits_x)]) for _ in range(8)])
            return [list(r.as_numpy("probabilities").argmax(1)) for r in results]

    assert asyncio.run(go()) == [[3, 7]] * 8


def test_statistics_count_grpc_requests(gc, digits_x):
    before = gc.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    for _ in range(3):
        gc.infer("digits", [grpc_input("images", digits_x)])
    after = gc.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    success = lambda s: int(s["inference_stats"]["success"].get("count", 0))  # noqa: E731
    assert success(after) - success(before) == 3
    assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == 6
    names = {s["name"] for s in gc.get_inference_statistics(as_json=True)["model_stats"]}
    assert {"digits", "astronaut"} <= names
