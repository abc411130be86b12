"""gRPC bad input: each gets the status code Triton gives and a message naming the problem, and
the server keeps answering (HTTP's bad values too: NaN and Inf, booleans, lies about the tensors, a cancelled
call). Also the restricted API key as metadata, the repository RPCs behind it, and the drain."""

from __future__ import annotations

import shutil
import signal
import subprocess

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from service.api.grpc.servicer import SERVICE
from tests.servers import PY, ROOT, HeldRequest, Server, in_flight, wait_for

KEY = "Rep0-Secret"


@pytest.fixture(scope="module")
def gc(server):
    c = tg.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def raw_call(url: str, method: str, body: bytes, timeout: float = 30):
    with grpc.insecure_channel(url) as ch:
        return ch.unary_unary(f"/{SERVICE}/{method}")(body, timeout=timeout)


def status_of(call) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as e:
        call()
    return e.value.status(), e.value.message()


def coords_input(x: np.ndarray) -> tg.InferInput:
    t = tg.InferInput("coords", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return t


def still_serves(gc) -> None:
    assert gc.infer("astronaut", [coords_input(np.full((4, 2), 0.5, np.float32))]).as_numpy("rgb").shape == (4, 3)


def test_a_malformed_protobuf_is_invalid_argument(gc, server):
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.grpc_url, "ModelInfer", b"\x0a\xff\xff\xff\xff\x0f")  # field 1, length past the end
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid ModelInferRequest protobuf" in e.value.details()
    still_serves(gc)


def test_raw_bytes_that_disagree_with_shape_and_datatype(gc, server):
    msg = pb.ModelInferRequest(model_name="astronaut")
    msg.inputs.add(name="coords", datatype="FP32", shape=[4, 2])
    msg.raw_input_contents.append(b"\0" * 30)
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.grpc_url, "ModelInfer", msg.SerializeToString())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'coords': 30 binary bytes do not match shape [4, 2] of FP32 (32 bytes)" in e.value.details()
    still_serves(gc)


def test_typed_contents_and_raw_contents_together(gc, server):
    msg = pb.ModelInferRequest(model_name="astronaut")
    t = msg.inputs.add(name="coords", datatype="FP32", shape=[1, 2])
    t.contents.fp32_contents.extend([0.5, 0.5])
    msg.raw_input_contents.append(np.zeros(2, np.float32).tobytes())
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.grpc_url, "ModelInfer", msg.SerializeToString())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents must not be given when raw_input_contents is used" in e.value.details()
    t.ClearField("contents")
    t.contents.fp32_contents.extend([0.5])  # typed, one value short
    del msg.raw_input_contents[:]
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.grpc_url, "ModelInfer", msg.SerializeToString())
    assert "contents.fp32_contents has 1 values but shape [1, 2] needs 2" in e.value.details()


def test_unknown_model_or_version_is_not_found(gc):
    x = [coords_input(np.zeros((1, 2), np.float32))]
    code, message = status_of(lambda: gc.infer("no-such-model", x))
    assert code == "StatusCode.NOT_FOUND" and "unknown model 'no-such-model'" in message
    code, message = status_of(lambda: gc.infer("astronaut", x, model_version="9"))
    assert code == "StatusCode.NOT_FOUND" and "version 9" in message
    code, message = status_of(lambda: gc.get_model_metadata("astronaut", "x"))
    assert code == "StatusCode.INVALID_ARGUMENT" and "'x' is not a non-negative integer" in message
    code, message = status_of(lambda: gc.infer("tampered", x))
    assert code == "StatusCode.UNAVAILABLE" and "sha256" in message
    code, message = status_of(
        lambda: gc.infer(
            "astronaut", [tg.InferInput("coords", [1, 3], "FP32").set_data_from_numpy(np.zeros((1, 3), np.float32))]
        )
    )
    assert code == "StatusCode.INVALID_ARGUMENT" and "unexpected shape for input 'coords'" in message


def test_a_message_over_the_receive_limit_is_resource_exhausted(gc):
    big = np.zeros((300_000, 2), np.float32)  # 2.4 MB against the test server's INR_MAX_BODY_BYTES of 2 MB
    code, message = status_of(lambda: gc.infer("astronaut", [coords_input(big)]))
    assert code == "StatusCode.RESOURCE_EXHAUSTED" and "larger than max" in message
    code, message = status_of(lambda: gc.infer("astronaut", [coords_input(big[:6000])]))  # over the row limit
    assert code == "StatusCode.RESOURCE_EXHAUSTED" and "5000" in message
    still_serves(gc)


def test_an_expired_deadline_is_deadline_exceeded(gc):
    # The most rows the test server takes (5000), so that the answer cannot come back inside gRPC's
    # millisecond deadline resolution; one row under a 1 µs timeout once did (CI, 2026-12-01).
    rows = np.random.default_rng(0).random((5000, 2), dtype=np.float32)
    code, _ = status_of(lambda: gc.infer("astronaut", [coords_input(rows)], client_timeout=1e-6))
    assert code == "StatusCode.DEADLINE_EXCEEDED"
    still_serves(gc)


def invalid(url: str, msg: pb.ModelInferRequest) -> str:
    """The message of the INVALID_ARGUMENT a ModelInfer call gets."""
    with pytest.raises(grpc.RpcError) as e:
        raw_call(url, "ModelInfer", msg.SerializeToString())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    return e.value.details()


def test_nan_inf_booleans_and_lies_about_the_raw_tensors(gc, server):
    """HTTP's bad values, over gRPC: each INVALID_ARGUMENT naming it, and the server goes on."""
    for bad in (np.nan, np.inf, -np.inf):
        msg = pb.ModelInferRequest(model_name="astronaut")
        msg.inputs.add(name="coords", datatype="FP32", shape=[2, 2])
        msg.raw_input_contents.append(np.array([[0.5, 0.5], [bad, 0.5]], np.float32).tobytes())
        assert "input 'coords' contains NaN or Inf" in invalid(server.grpc_url, msg)
    msg = pb.ModelInferRequest(model_name="astronaut")  # booleans as numbers
    msg.inputs.add(name="coords", datatype="FP32", shape=[1, 2]).contents.bool_contents.extend([True, False])
    assert "FP32 data belongs in contents.fp32_contents, got contents.bool_contents" in invalid(server.grpc_url, msg)
    msg.inputs[0].datatype = "BOOL"
    assert "data-type is 'BOOL', but model 'astronaut' expects 'FP32'" in invalid(server.grpc_url, msg)
    msg = pb.ModelInferRequest(model_name="astronaut")  # more raw tensors than inputs
    msg.inputs.add(name="coords", datatype="FP32", shape=[1, 2])
    msg.raw_input_contents.extend([np.zeros(2, np.float32).tobytes()] * 2)
    assert "raw_input_contents holds 2 tensors for 1 inputs" in invalid(server.grpc_url, msg)
    msg = pb.ModelInferRequest(model_name="astronaut")  # a shape that lies about the bytes' rows
    msg.inputs.add(name="coords", datatype="FP32", shape=[2, 2])
    msg.raw_input_contents.append(np.zeros(2, np.float32).tobytes())
    assert "8 binary bytes do not match shape [2, 2] of FP32 (16 bytes)" in invalid(server.grpc_url, msg)
    still_serves(gc)


def test_a_client_that_cancels_mid_call_leaves_the_server_serving(gc, server):
    msg = pb.ModelInferRequest(model_name="astronaut")
    msg.inputs.add(name="coords", datatype="FP32", shape=[5000, 2])
    msg.raw_input_contents.append(np.random.default_rng(1).random((5000, 2), dtype=np.float32).tobytes())
    with grpc.insecure_channel(server.grpc_url) as ch:
        calls = [ch.unary_unary(f"/{SERVICE}/ModelInfer").future(msg.SerializeToString()) for _ in range(4)]
        for call in calls:
            call.cancel()
    for _ in range(3):
        still_serves(gc)


def test_an_unimplemented_rpc_is_unimplemented(gc):
    code, _ = status_of(lambda: gc.get_system_shared_memory_status())
    assert code == "StatusCode.UNIMPLEMENTED"


@pytest.fixture(scope="module")
def explicit(model_repo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("grpc-models")
    for name in ("astronaut", "digits"):
        shutil.copytree(model_repo / name, repo / name)
    srv = Server(
        repo,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--http-restricted-api",
        f"model-repository,model-config:admin-key={KEY}",
    )
    with srv.running():
        yield srv


def test_repository_load_and_unload_need_the_key_as_metadata(explicit):
    c = tg.InferenceServerClient(explicit.grpc_url)
    key = {"admin-key": KEY}
    for call in (
        lambda h: c.get_model_repository_index(headers=h),
        lambda h: c.load_model("digits", headers=h),
        lambda h: c.unload_model("digits", headers=h),
        lambda h: c.get_model_config("digits", headers=h),
    ):
        for wrong in (None, {"admin-key": "guess"}):
            code, message = status_of(lambda: call(wrong))
            assert code == "StatusCode.PERMISSION_DENIED" and "admin-key" in message and KEY not in message
    index = c.get_model_repository_index(headers=key, as_json=True)["models"]
    assert {"astronaut", "digits"} <= {m["name"] for m in index}
    c.unload_model("digits", headers=key)
    assert not c.is_model_ready("digits")
    code, _ = status_of(
        lambda: c.infer(
            "digits",
            [tg.InferInput("images", [1, 1, 28, 28], "FP32").set_data_from_numpy(np.zeros((1, 1, 28, 28), np.float32))],
        )
    )
    assert code == "StatusCode.NOT_FOUND"  # an unloaded model is gone from the registry, as over HTTP (404)
    c.load_model("digits", headers=key)
    assert c.is_model_ready("digits")
    code, message = status_of(lambda: c.load_model("no-such-model", headers=key))
    assert code == "StatusCode.NOT_FOUND" and "no-such-model" in message
    code, message = status_of(lambda: c.load_model("digits", headers=key, config='{"max_batch_size": 2}'))
    assert code == "StatusCode.INVALID_ARGUMENT" and "config" in message
    assert c.get_model_config("digits", headers=key).config.name == "digits"
    c.close()


def test_draining_refuses_new_calls_and_health_says_not_serving(model_repo):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    srv = Server(model_repo, env={"INR_GRACEFUL_SHUTDOWN_S": "60", "INR_BODY_TIMEOUT_S": "60"}).wait_ready()
    c = tg.InferenceServerClient(srv.grpc_url)
    idle = in_flight(srv.url)
    # an HTTP render holds the drain open while gRPC is asked: in flight by construction, its body held back
    render = HeldRequest(srv.url, "/v1/models/astronaut/render", {"width": 64, "height": 64})
    wait_for(lambda: in_flight(srv.url) >= idle + 1, 30, "the render in flight")
    srv.proc.send_signal(signal.SIGTERM)

    def health():
        with grpc.insecure_channel(srv.grpc_url) as ch:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status

    wait_for(lambda: health() == health_pb2.HealthCheckResponse.NOT_SERVING, 30, "gRPC health NOT_SERVING")
    code, message = status_of(lambda: c.infer("astronaut", [coords_input(np.zeros((1, 2), np.float32))]))
    assert code == "StatusCode.UNAVAILABLE" and "shutting down" in message
    assert c.is_server_live()
    render.release()
    status, headers, _ = render.answer()
    srv.proc.wait(timeout=30)
    assert status == 200 and headers["content-type"] == "image/png"
    c.close()


def test_grpc_port_0_turns_grpc_off_and_a_bad_port_is_one_line(model_repo):
    srv = Server(model_repo, "--grpc-port", "0").wait_ready()  # the last --grpc-port wins over the helper's
    try:
        assert httpx.get(f"{srv.url}/v2/health/ready").status_code == 200
        with grpc.insecure_channel(srv.grpc_url) as ch:
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(ch).result(timeout=2)
    finally:
        srv.stop()
    r = subprocess.run(
        [PY, "-m", "service", "--models", str(model_repo), "--grpc-port", "70000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: --grpc-port: "), r.stderr
