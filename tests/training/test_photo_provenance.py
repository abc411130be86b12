"""`python -m training.photo_provenance`: a photo's provenance goes into the model fitted from it (`make models`),
and a model fitted from another file, or a photo that changed since its provenance was written, is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image

from modelrepo import check_version, read_spec, read_version, sha256_file

PHOTO = {
    "subject": "a gradient",
    "title": "ramp",
    "author": "A. Tester",
    "year": 2026,
    "licence": "CC0-1.0",
    "package": "none 1.0 (made by the test)",
    "original_size": [48, 32],
    "downscale": "none",
}


def run(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_the_provenance_goes_into_the_newest_version_and_the_spec(tmp_path):
    ramp = np.linspace(0, 255, 24 * 16 * 3).reshape(16, 24, 3).astype(np.uint8)
    Image.fromarray(ramp).save(tmp_path / "ramp.png")
    fit = run(
        tmp_path,
        "training",
        "fit-image",
        "--image",
        "ramp.png",
        "--steps",
        "3",
        "--width",
        "16",
        "--depth",
        "2",
        "--features",
        "16",
        "--protocol",
        "full",
        "--no-progress",
        "--out",
        "m",
    )
    assert fit.returncode == 0, fit.stderr
    provenance = {"file": "ramp.png", "sha256": sha256_file(tmp_path / "ramp.png"), **PHOTO}
    (tmp_path / "ramp.json").write_text(json.dumps(provenance))
    (tmp_path / "stale.json").write_text(json.dumps({**provenance, "sha256": "0" * 64}))
    (tmp_path / "other.json").write_text(json.dumps({**provenance, "file": "other.png"}))
    before = (tmp_path / "m" / "1" / "metadata.json").read_text()
    for bad, why in (("stale.json", "the photo changed"), ("other.json", "not from 'other.png'")):
        r = run(tmp_path, "training.photo_provenance", "m", bad)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    assert (tmp_path / "m" / "1" / "metadata.json").read_text() == before, "a refused run changes nothing"

    r = run(tmp_path, "training.photo_provenance", "m", "ramp.json")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "m" / "1" / "metadata.json").read_text())
    assert meta["source"]["photo"] == {k: v for k, v in provenance.items() if k != "file"}
    assert meta["source"]["size"] == [24, 16] and meta["source"]["image"] == "ramp.png"
    psnr = meta["metrics"]["full_psnr"]
    assert meta["description"].endswith(f"fitted at that native size for 3 steps: {psnr:.2f} dB PSNR over all pixels")
    assert "CC0-1.0" in meta["description"] and "from 48×32 to 24×16" in meta["description"]
    assert read_spec(tmp_path / "m").metadata["description"] == meta["description"]
    check_version(tmp_path / "m", read_version(tmp_path / "m", 1))  # the ONNX file is untouched
    assert not [p.name for p in (tmp_path / "m").rglob(".*")], "no temporary file left"
