"""Every example of README.md and docs/*.md runs as written (tests/docs/live.py says against what and what fails one;
tests/docs/examples.py how they are found and marked), in the order the pages are read: README.md, then docs/
alphabetically, each page from the top. Afterwards, every fit the examples queued has succeeded."""

from __future__ import annotations

import importlib.util
import re
import time

import httpx
import pytest

from .examples import Example, read
from .live import ROOT, Stack

EXAMPLES, PROBLEMS = read(ROOT)
FITS_TIMEOUT_S = 600
MIN_PSNR_DB = 20.0  # a fit the docs show is a picture, not a blob
MODULE = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python3?\s+-m\s+([\w.]+)", re.M)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("docs-examples"))
    try:
        yield s.start()
    finally:
        s.stop()


def test_every_code_block_says_whether_it_runs():
    assert PROBLEMS == []


def test_every_module_an_example_runs_exists():
    """Also in the examples not run here (the benchmarks, the containers): `python -m NAME` names a module."""
    missing = [(e.id, m) for e in EXAMPLES for m in MODULE.findall(e.code) if importlib.util.find_spec(m) is None]
    assert missing == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example(example, stack):
    if example.skip:
        pytest.skip(example.skip)
    wrong = stack.run(example)
    assert not wrong, f"{example.id}:\n" + "\n".join(wrong)


def test_every_fit_the_examples_queued_succeeded(stack):
    end = time.monotonic() + FITS_TIMEOUT_S
    while True:
        fits = httpx.get(f"{stack.url}/v1/fits", timeout=10).json()["fits"]
        if all(f["state"] in ("succeeded", "failed", "cancelled") for f in fits) or time.monotonic() > end:
            break
        time.sleep(1)
    assert fits, "the examples queue fits"
    for f in fits:
        assert f["state"] == "succeeded", f
        assert f["psnr"] is not None and f["psnr"] >= MIN_PSNR_DB, f


@pytest.mark.parametrize(
    "lang, code, caught",
    [
        ("sh", "curl -s localhost:8000/health/ready\nfalse\n", "exit code 1"),
        ("sh", "curl -s localhost:8000/v1/models/no-such-model", "/v1/models/no-such-model answered 404"),
        (
            "sh",
            "mkdir -p build\ncurl -s localhost:8000/iiif/3/astronaut/full/512,/0/default.jpg -o build/x.jpg",
            "no image",
        ),
        ("sh", "curl -s localhost:8000/health/ready -o ready.json", "it wrote ready.json into the repository"),
        ("sh", "mkdir -p models/x && touch models/x/y", "it wrote models/x/y into the repository"),
        ("python", "import torch  # the training extra's, not `make serve`'s\n", "`make serve` does not install it"),
    ],
    ids=["fails", "error-status", "error-as-image", "dirties-the-clone", "dirties-models", "outside-the-serve-extras"],
)
def test_a_broken_example_is_caught(lang, code, caught, stack):
    """The guard itself: each way an example can be wrong fails it."""
    wrong = stack.run(Example("guard.md", 1, lang, code))
    assert any(caught in w for w in wrong), wrong
