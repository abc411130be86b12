"""config.pbtxt `model_warmup` against the real server: bad warmups fail their version with the reason, a file
warmup runs, and a reload under load with warmup serves no cold first request and no error."""
from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import numpy as np
from bench.warmup import reload_under_load
from tests.servers import ROOT, Server
from live import private_repo


def variant(repo: Path, src: str, name: str, old: str, new: str) -> Path:
    """A copy of model `src` named `name` whose config.pbtxt has `old` replaced by `new`."""
    dst = repo / name
    shutil.copytree(repo / src, dst)
    cfg = dst / "config.pbtxt"
    text = cfg.read_text().replace(f'name: "{src}"', f'name: "{name}"')
    assert old in text, f"{old!r} is not in {src}'s config.pbtxt"
    cfg.write_text(text.replace(old, new))
    return dst


def test_bad_warmups_fail_the_version_with_the_reason_and_a_good_file_warmup_serves(model_repo, tmp_path):
    repo = private_repo(model_repo, tmp_path / "models")
    assert "model_warmup" in (repo / "astronaut" / "config.pbtxt").read_text(), "the export wrote no warmup"
    variant(repo, "astronaut", "warm-unknown-input", 'key: "coords"', 'key: "pixels"')
    variant(repo, "astronaut", "warm-missing-file", "random_data: true", 'input_data_file: "coords.bin"')
    variant(repo, "astronaut", "warm-bad-dims", "dims: 2\n      random_data", "dims: 3\n      random_data")
    good = variant(repo, "astronaut", "warm-file", "random_data: true", 'input_data_file: "coords.bin"')
    (good / "warmup").mkdir()
    (good / "warmup" / "coords.bin").write_bytes(np.array([0.25, 0.75], np.float32).tobytes())
    srv = Server(repo).wait_ready()
    try:
        for name, reason in (("warm-unknown-input", "model_warmup 'random_coords' input 'pixels': the model has no "
                                                    "input 'pixels'; its inputs: coords"),
                             ("warm-missing-file", "input_data_file warmup/coords.bin: No such file or directory"),
                             ("warm-bad-dims", "FP32 [3] does not match the model's input FP32 [2]")):
            r = httpx.get(f"{srv.url}/v2/models/{name}/versions/1/ready")
            assert r.status_code == 400 and reason in r.json()["error"], (name, r.text)
            row = next(m for m in httpx.post(f"{srv.url}/v2/repository/index").json() if m["name"] == name)
            assert row["state"] == "UNAVAILABLE" and reason in row["reason"]
        assert httpx.get(f"{srv.url}/v2/models/warm-file/ready").status_code == 200
        assert httpx.get(f"{srv.url}/v2/models/astronaut/ready").status_code == 200
    finally:
        srv.stop()


def test_a_reload_under_load_with_warmup_has_no_cold_first_request(tmp_path):
    """The bundled astronaut model (its cold first run costs several warm ones; bench.warmup shows the same
    reload without warmup); 3 clients send 2,000 coordinates each in a loop while the poll swaps in version 2."""
    r = reload_under_load(ROOT / "models" / "astronaut", tmp_path, warmup=True)
    assert r["non_200"] == [] and r["requests"] > 20
    assert r["ratio"] <= 3, f"version 2's first request took {r['first_ms']:.0f} ms, warm p50 {r['warm_p50_ms']:.0f} ms"
