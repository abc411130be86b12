"""`fit-image --out models/NAME` into an existing model writes the next version beside the first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from modelrepo import read_spec, read_version, sha256_file, version_numbers

ROOT = Path(__file__).resolve().parents[2]


def fit(out: Path, seed: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            "astronaut",
            "--size",
            "16",
            "--steps",
            "3",
            "--width",
            "16",
            "--depth",
            "2",
            "--features",
            "16",
            "--seed",
            str(seed),
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_a_second_fit_into_the_same_folder_is_version_2(tmp_path):
    out = tmp_path / "models" / "tiny"
    assert fit(out, 0).returncode == 0
    second = fit(out, 1)
    assert second.returncode == 0, second.stderr
    assert version_numbers(out) == [1, 2]
    assert read_spec(out).task == "image"
    for n in (1, 2):
        record = read_version(out, n)
        assert record.onnx_sha256 == sha256_file(out / str(n) / "model.onnx")
        assert (out / str(n) / "preview.png").is_file()
    assert read_version(out, 1).onnx_sha256 != read_version(out, 2).onnx_sha256
    assert json.loads((out / "2" / "metadata.json").read_text())["version"] == 2
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
