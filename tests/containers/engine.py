"""The container engine and compose tool the suite drives, through their command lines only.

Podman (with podman-compose) or Docker (with Docker Compose v2), whichever answers `info`; Podman
first, because that is what runs on this project's CI machines. Everything the suite creates is named
with its own prefix, so that `cleanup()` can remove it even after a failed check.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "inrci"
RUNTIME_IMAGE, TRAIN_IMAGE = "inr-serve:cpu", "inr-serve:train"
PYTHON_BASE = "python:3.11-slim-bookworm"


class EngineError(RuntimeError):
    pass


def run(argv: list[str], timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and result.returncode != 0:
        raise EngineError(
            f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class Engine:
    cli: str  # "podman" or "docker"
    compose: list[str]  # the compose tool's argv prefix

    @classmethod
    def find(cls) -> "Engine | None":
        for cli in ("podman", "docker"):
            if shutil.which(cli) and _works([cli, "info"]):
                return cls(cli, cls._compose_for(cli))
        return None

    @staticmethod
    def _compose_for(cli: str) -> list[str]:
        if cli == "docker" and _works(["docker", "compose", "version"]):
            return ["docker", "compose"]
        tool = shutil.which("podman-compose") or str(Path(sys.executable).with_name("podman-compose"))
        if not Path(tool).exists():
            raise EngineError("podman-compose is not installed (pip install -e '.[dev]')")
        return [tool]

    def __call__(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return run([self.cli, *args], timeout=timeout, check=check)

    def inspect(self, what: str) -> dict:
        return json.loads(self("inspect", what).stdout)[0]

    def image_exists(self, name: str) -> bool:
        return self("image", "inspect", name, check=False).returncode == 0

    def image_size(self, name: str) -> int:
        return int(json.loads(self("image", "inspect", name).stdout)[0]["Size"])

    def cleanup(self) -> None:
        """Remove every container, network and volume of the suite's compose projects."""
        names = self("ps", "-a", "--format", "{{.Names}}").stdout.split()
        ours = [n for n in names if n.startswith(PREFIX)]
        if ours:
            self("rm", "-f", "-t", "0", *ours, check=False)
        if self.cli == "podman":  # podman-compose and `kube play` make pods as well
            pods = self("pod", "ls", "--format", "{{.Name}}", check=False).stdout.split()
            gone = [p for p in pods if p.startswith((PREFIX, f"pod_{PREFIX}"))]
            if gone:
                self("pod", "rm", "-f", *gone, check=False)
        for kind in ("network", "volume"):
            listed = self(kind, "ls", "--format", "{{.Name}}", check=False).stdout.split()
            gone = [n for n in listed if n.startswith(PREFIX)]
            if gone:
                self(kind, "rm", "-f", *gone, check=False)

    # -- builds ------------------------------------------------------------------------------
    def build(self, target: str, tag: str) -> float:
        """Build a Dockerfile target, unmodified; returns the seconds it took."""
        args = ["build", "--target", target, "-t", tag]
        if self.cli == "podman":
            args += ["--format", "docker"]  # OCI format drops HEALTHCHECK
        if target == "train" and self.cli == "podman":  # `docker build` mounts nothing
            args += local_torch_wheels()
        t0 = time.monotonic()
        self(*args, str(ROOT), timeout=1800)
        return time.monotonic() - t0

    def offline_bases(self) -> None:
        """The stand-in base images, for a machine that cannot pull them (deploy/offline-bases)."""
        run(
            ["bash", str(ROOT / "deploy" / "offline-bases" / "build.sh")],
            timeout=900,
            env={**os.environ, "ENGINE": self.cli},
        )


def build_s3_image(engine: Engine, tag: str = "inr-serve:s3") -> float:
    """The S3 server's image (deploy/s3/s3.Containerfile: Swift's S3 API), as docker-compose.s3.yml builds it;
    returns the seconds it took."""
    docker_format = ["--format", "docker"] if engine.cli == "podman" else []  # OCI drops HEALTHCHECK
    s3 = ROOT / "deploy" / "s3"
    t0 = time.monotonic()
    engine("build", *docker_format, "-t", tag, "-f", str(s3 / "s3.Containerfile"), str(s3), timeout=1800)
    return round(time.monotonic() - t0, 1)


def local_torch_wheels() -> list[str]:
    """Build options that let the train stage take torch from this machine's local wheel folder (pip's
    `find-links`, where this CI keeps the CPU wheel) when the default TORCH_INDEX cannot be reached.
    Nothing when there is no such folder: the Dockerfile's own index is used."""
    config = run([sys.executable, "-m", "pip", "config", "list"], check=False).stdout
    folders = []
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            folders += [f for f in value.strip("'\"").split() if Path(f).is_dir() and any(Path(f).glob("torch-*.whl"))]
    if not folders:
        return []
    conf = configparser.ConfigParser()
    conf["global"] = {"find-links": " ".join(folders)}
    path = ROOT / "build" / "containers" / "pip.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        conf.write(f)
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    mounts = [f"--volume={f}:{f}:ro" for f in dict.fromkeys(folders)]
    return [*mounts, f"--volume={path}:/etc/pip.conf:ro", "--build-arg", f"TORCH_INDEX={index}"]
