"""The ONNX runtime: loading checks, providers, thread counts."""

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from modelrepo import read_spec
from service.engine.cpus import available_cpus, cgroup_cpu_limit, default_threads
from service.engine.registry import Registry
from service.engine.runtime import ModelRuntime, RuntimeOptions
from service.engine.sessions import check_device_available
from service.errors import DeviceError


def version_1(path, options: RuntimeOptions) -> ModelRuntime:
    return ModelRuntime(path, read_spec(path), 1, options)


@pytest.mark.parametrize(
    "cpu_max,expected",
    [("max 100000", None), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1), ("garbage", None)],
)
def test_cgroup_v2_quota_is_rounded_up_to_whole_cpus(cpu_max, expected):
    assert cgroup_cpu_limit(cpu_max) == expected


def test_cgroup_v1_quota_is_read_and_minus_one_means_none():
    assert cgroup_cpu_limit(quota_us="300000", period_us="100000") == 3
    assert cgroup_cpu_limit(quota_us="-1", period_us="100000") is None


def test_available_cpus_never_exceed_the_affinity_mask():
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_image_model_predicts_what_onnxruntime_computes(model_repo):
    model = version_1(model_repo / "astronaut", RuntimeOptions(threads=1))
    assert model.load() and model.ready and model.provider == "CPUExecutionProvider"
    coords = np.random.default_rng(0).random((100, 2), dtype=np.float32)
    ref = ort.InferenceSession(str(model_repo / "astronaut" / "1" / "model.onnx")).run(["rgb"], {"coords": coords})
    assert np.array_equal(model.predict(coords)["rgb"], ref[0])


def test_digits_model_gives_logits_and_probabilities(model_repo):
    model = version_1(model_repo / "digits", RuntimeOptions(threads=1))
    assert model.load()
    out = model.predict(np.zeros((3, 1, 28, 28), np.float32))
    assert out["logits"].shape == (3, 10) and np.allclose(out["probabilities"].sum(axis=1), 1.0, atol=1e-5)


def test_cuda_that_does_not_really_run_the_session_stops_loading(model_repo):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA; the refusal path needs a CPU-only onnxruntime")
    model = version_1(model_repo / "astronaut", RuntimeOptions(device="cuda"))
    with pytest.raises(DeviceError, match="does not run on CUDAExecutionProvider"):
        model.load()
    with pytest.raises(DeviceError, match="onnxruntime-gpu"):
        check_device_available("cuda")


def test_auto_falls_back_to_cpu_and_reports_it(model_repo):
    model = version_1(model_repo / "astronaut", RuntimeOptions(device="auto"))
    assert model.load()
    has_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert model.provider == ("CUDAExecutionProvider" if has_cuda else "CPUExecutionProvider")


@pytest.mark.parametrize(
    "name,reason",
    [
        ("broken-onnx", "unreadable ONNX file"),
        ("tampered", "does not match 1/metadata.json onnx_sha256"),
        ("wrong-inputs", "the ONNX graph of version 1 disagrees with the spec: inputs [('images'"),
        ("no-metadata", "config.pbtxt: platform 'tensorrt_plan' is not onnxruntime_onnx"),
        ("junk-metadata", "metadata.json: 'inputs' must be a non-empty list of tensors, got 'x'"),
        ("no-inputs", "metadata.json: 'inputs' must be a non-empty list of tensors, got None"),
        ("truncated-config", "config.pbtxt does not parse as Triton's ModelConfig"),
    ],
)
def test_broken_models_fail_with_their_reason(model_repo, name, reason):
    registry = Registry(model_repo, RuntimeOptions())
    state = registry.load(name)
    assert not state.ready and state.status == "failed" and reason in state.reason


def test_default_threads_share_the_cpus_between_workers():
    assert default_threads(1) == available_cpus()
    assert default_threads(available_cpus() * 2) == 1


def test_an_image_model_has_one_session_on_the_render_threads(model_repo):
    """INR_RENDER_THREADS: an image model's one session runs its queries and its render tiles (one copy of its
    tables in memory); a separable one loads its body beside it on the same threads; a digits model keeps
    INR_THREADS."""
    root = Path(__file__).resolve().parents[3]
    grid = version_1(root / "models" / "dandelion", RuntimeOptions(threads=2, render_threads=1))
    assert grid.load() and grid.separable is None and grid.render_session is grid.session
    assert grid.session.get_session_options().intra_op_num_threads == 1
    coords = np.random.default_rng(0).random((500, 2), dtype=np.float32)
    assert np.array_equal(grid.render_rgb(coords), grid.predict(coords)["rgb"])
    fourier = version_1(model_repo / "astronaut", RuntimeOptions(threads=2, render_threads=1))
    assert fourier.load() and fourier.separable is not None and fourier.render_session is fourier.session
    assert fourier.separable.session.get_session_options().intra_op_num_threads == 1
    digits = version_1(model_repo / "digits", RuntimeOptions(threads=2, render_threads=1))
    assert digits.load() and digits.session.get_session_options().intra_op_num_threads == 2
