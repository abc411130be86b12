"""The container suite: real images from the unmodified Dockerfile, docker-compose.yml brought up by a
real engine, every request through nginx. Marked `containers` (`pytest -m containers` selects it,
`-m "not containers"` skips it). Without a working engine it skips, unless INR_REQUIRE_CONTAINERS=1
(.ci/run sets it), which turns the skip into a failure.

Measurements (build times, sizes, time to healthy, failover and drain counts) are collected in
`report` and written to build/containers/report.json at the end; docs/containers.md quotes them ("Measured").
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from .engine import PYTHON_BASE, ROOT, RUNTIME_IMAGE, TRAIN_IMAGE, Engine, EngineError
from .stack import Stack

HERE = Path(__file__).resolve().parent
REPORT: dict = {}


REPORT_FILE = ROOT / "build" / "containers" / "report.json"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.containers)


def pytest_sessionfinish(session):
    # here, not in the summary: under pytest-xdist the report is filled in a worker, which prints no summary
    if REPORT:
        REPORT_FILE.parent.mkdir(parents=True, exist_ok=True)
        REPORT_FILE.write_text(json.dumps(REPORT, indent=2, sort_keys=True) + "\n")


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.write_sep("-", f"container measurements ({REPORT_FILE.relative_to(ROOT)})")
        for key, value in sorted(REPORT.items()):
            terminalreporter.write_line(f"{key}: {value}")


@pytest.fixture(scope="session")
def report() -> dict:
    return REPORT


@pytest.fixture(scope="session")
def engine() -> Engine:
    found = Engine.find()
    if found is None:
        if os.environ.get("INR_REQUIRE_CONTAINERS") == "1":
            pytest.fail("INR_REQUIRE_CONTAINERS=1 but neither podman nor docker answers `info`")
        pytest.skip("no container engine (podman or docker) answers `info`")
    found.cleanup()  # leftovers of an interrupted earlier run
    yield found
    found.cleanup()


def _bases(engine: Engine, report: dict) -> None:
    """The base images, pulled, or built locally when they cannot be (INR_OFFLINE_BASES=1 skips the pull).
    With INR_OFFLINE_BASES=1 deploy/offline-bases/build.sh always runs: it keeps what is there, and rebuilds a
    stand-in made before the stack needed more of it."""
    wanted = [PYTHON_BASE, "nginx:1.29-alpine", "redis:7-alpine"]  # redis: the `redis` profile (test_trainers.py)
    missing = [b for b in wanted if not engine.image_exists(b)]
    offline = os.environ.get("INR_OFFLINE_BASES") == "1"
    if missing and not offline:
        for base in missing:
            engine("pull", base, check=False, timeout=300)
        missing = [b for b in wanted if not engine.image_exists(b)]
    if missing or offline:
        t0 = time.monotonic()
        engine.offline_bases()
        report["offline_bases_s"] = round(time.monotonic() - t0, 1)


@pytest.fixture(scope="session")
def images(engine: Engine, report: dict) -> Engine:
    _bases(engine, report)
    for target, tag in (("runtime", RUNTIME_IMAGE), ("train", TRAIN_IMAGE)):
        try:
            report[f"build_{target}_s"] = round(engine.build(target, tag), 1)
        except EngineError as e:
            pytest.fail(f"building the {target} target failed: {e}")
        report[f"image_{target}_mb"] = round(engine.image_size(tag) / 1e6)
    report["image_base_mb"] = round(engine.image_size(PYTHON_BASE) / 1e6)
    return engine


@pytest.fixture(scope="module")
def make_stack(images: Engine, tmp_path_factory):
    """Stacks made by a test module; each is taken down, and its leftovers removed, at the end."""
    made: list[Stack] = []

    def make(name: str, file: str = "docker-compose.yml") -> Stack:
        stack = Stack(images, tmp_path_factory.mktemp(name), name, file)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.down()


@pytest.fixture(scope="module")
def http(stack) -> httpx.Client:
    """A client of nginx's published port, for the module's own `stack` fixture."""
    with httpx.Client(base_url=stack.url, timeout=60) as c:
        yield c
