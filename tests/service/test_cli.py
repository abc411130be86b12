"""`python -m service`: bad input is one line and exit code 2; empty repositories and --device auto start."""

import subprocess

import httpx
import onnxruntime as ort
import pytest

from tests.servers import PY, ROOT, Server


def run_cli(*args, env=None):
    import os

    return subprocess.run(
        [PY, "-m", "service", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["--port", "http"], None, "error: --port: Input should be a valid integer"),
        (["--port", "70000"], None, "error: --port: Input should be less than or equal to 65535"),
        (["--workers", "0"], None, "error: --workers:"),
        (["--models", "/does/not/exist"], None, "error: --models '/does/not/exist' is not a directory"),
        (["--device", "gpu"], None, "error: python -m service: argument --device: invalid choice: 'gpu'"),
        (["--bogus"], None, "error: python -m service: unrecognized arguments: --bogus"),
        ([], {"INR_DEVICE": "tpu"}, "error: --device: Input should be 'cpu', 'cuda' or 'auto'"),
        ([], {"INR_FIT_STORE": "mysql://db/fits"}, "error: --fit-store: unknown job store 'mysql://db/fits'"),
        ([], {"INR_FIT_STORE": "sqlite:///"}, "error: --fit-store: store URL 'sqlite:///' names no file"),
    ],
)
def test_bad_command_lines_print_one_line_and_exit_2(tmp_path, args, env, message):
    r = run_cli("--models", str(tmp_path), *args, env=env) if "--models" not in args else run_cli(*args, env=env)
    assert r.returncode == 2
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr


def test_device_cuda_without_cuda_refuses_to_start(model_repo):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA")
    r = run_cli("--models", str(model_repo), "--device", "cuda", "--port", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: --device cuda: this onnxruntime has no CUDAExecutionProvider")


def test_an_empty_model_repository_serves_no_models(tmp_path):
    srv = Server(tmp_path).wait_ready()
    try:
        assert httpx.get(f"{srv.url}/v1/models").json() == {"models": []}
        assert httpx.get(f"{srv.url}/health/ready").json() == {"status": "ready", "models_ready": 0, "models_failed": 0}
    finally:
        srv.stop()


def test_device_auto_serves_and_each_model_names_its_provider(model_repo):
    srv = Server(model_repo, "--device", "auto", "--model-loading", "startup", env={"INR_THREADS": "1"}).wait_ready()
    try:
        m = httpx.get(f"{srv.url}/v1/models/digits").json()
        expected = (
            "CUDAExecutionProvider"
            if "CUDAExecutionProvider" in ort.get_available_providers()
            else "CPUExecutionProvider"
        )
        assert m["status"] == "ready" and m["provider"] == expected
    finally:
        srv.stop()


def test_several_workers_each_load_the_models_and_serve(model_repo):
    srv = Server(model_repo, "--workers", "2").wait_ready(timeout=120)
    try:
        for _ in range(4):
            r = httpx.post(f"{srv.url}/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]})
            assert r.status_code == 200
    finally:
        srv.stop()


def test_cuda_probe_refuses_a_session_that_does_not_really_run_on_cuda(model_repo):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA")
    from service.__main__ import probe_cuda
    from service.errors import DeviceError

    with pytest.raises(DeviceError, match="does not run on CUDAExecutionProvider"):
        probe_cuda(model_repo)
