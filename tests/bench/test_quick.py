"""The benchmarks run end to end on tiny sizes (`python -m bench.quick --preset smoke`).

Timing is never asserted here: speed lives in docs/benchmarks.md. These tests check that
every benchmark trains, exports, serves and measures real models and writes its results.
"""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import fits, quick

ROOT = Path(__file__).resolve().parents[2]
HAS_DIGITS = importlib.util.find_spec("training.digits") is not None


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    return out, quick.main(["--preset", "smoke", "--out-dir", str(out)])


def test_fourier_table_fits_every_encoding_on_every_image(smoke):
    out, results = smoke
    r = results["fourier_table"]
    encodings = ("none", "basic", "positional", "gaussian", "sine", "sinekan", "sinekan-projection")
    assert fits.ENCODINGS == encodings
    assert {(x["image"], x["encoding"]) for x in r["runs"]} == {
        (i, e) for i in ("astronaut", "text") for e in encodings
    }
    assert all(math.isfinite(x["test_psnr"]) and x["test_psnr"] > 0 for x in r["runs"])
    assert r["sigma"] in (2.0, 5.0) and len(r["sigma_sweep"]) == 2
    assert set(r["summary"]) == {"natural", "text"}
    assert "| gaussian (σ=" in fits.fourier_md(r)
    assert json.loads((out / "fourier_table.json").read_text())["runs"] == r["runs"]


def test_time_to_quality_reports_every_variant_with_its_final_quality(smoke):
    _, results = smoke
    r = results["time_to_quality"]
    assert set(r["summary"]) == {"paper", "lr 5e-3 cosine 500"}
    assert len(r["rows"]) == 4  # 2 variants × 2 rounds
    for v in r["summary"].values():
        assert v["final_test_psnr"] is not None and v["median_seconds_per_step"] > 0
    round2 = [x for x in r["rows"] if x["round"] == 2]
    assert all(x["stopped_at_target"] for x in round2)
    assert all(x["steps"] <= 20 for x in r["rows"])


def test_roofline_measures_onnxruntime_against_the_matmul_rate_and_the_real_render_route(smoke):
    _, results = smoke
    r = results["roofline"]
    # the Concat-free encoding projects onto 2π[B, B] (one Sin with a π/2 phase): K = 2, N = 512
    assert list(r["gemm_shapes"][0]) == [2, 512]
    assert r["gemm_flops_per_coord"] == 2 * (2 * 512 + 512 * 256 + 256 * 256 * 2 + 256 * 3)
    kernels = {x["kernel"] for x in r["compute"]}
    assert {"onnxruntime", "torch eager"} <= kernels
    assert all(x["gflops"] > 0 for x in r["compute"])
    render = r["render"][0]
    assert render["size"] == 32 and render["png_bytes"] > 0 and render["render_over_bare"] > 0


def test_classic_serves_the_same_tiles_from_iipsrv_and_from_the_one_and_block_models(smoke):
    _, results = smoke
    r = results["classic"]
    if "skipped" in r:
        pytest.skip(r["skipped"])
    (photo,) = r["photos"]
    assert photo["size"] == [300, 200] and photo["tiles"] == 3 * 2 + 2 + 1  # 128² tiles at scales 1, 1/2, 1/4
    servers = photo["servers"]
    for name in ("one", "blocks"):
        s = servers[name]
        assert (
            s["bytes"] > 0
            and math.isfinite(s["psnr"])
            and s["psnr"] > 15
            and s["first_tile_s"] > 0
            and s["rss_after_tiles"] > 0
        )
        for clients in (1, 4):
            cell = s["cells"][clients]
            assert cell["tiles_per_s"] > 0 and cell["errors"] == 0 and cell["cpu_ms_per_tile"] > 0
            assert cell["p95_ms"] >= cell["p50_ms"] > 0
    assert "| smoke.png 300×200 | one |" in r["table"]
    if r["classic_missing"]:
        pytest.skip(f"the classic server: {r['classic_missing']}")
    iip = servers["iipsrv"]
    assert iip["bytes"] > 0 and iip["psnr"] > 30 and iip["cells"][4]["errors"] == 0
    assert iip["cells"][1]["tiles_per_s"] > 0 and iip["cells"][1]["cpu_ms_per_tile"] >= 0


@pytest.mark.skipif(not HAS_DIGITS, reason="training.digits is not in this checkout")
def test_sinekan_speed_times_all_four_exported_classifiers(smoke):
    _, results = smoke
    r = results["sinekan_speed"]
    models = {x["model"] for x in r["rows"]}
    assert {"sinekan", "bspline-kan", "fourier-kan", "mlp"} <= models
    assert {(x["batch"], x["runtime"]) for x in r["ratios"]} == {
        (b, rt) for b in (1, 8) for rt in ("onnxruntime", "torch eager")
    }
    assert all(x["bspline-kan_over_sinekan"] > 0 for x in r["ratios"])


def test_an_unknown_variant_is_one_line_error_with_the_valid_names():
    p = subprocess.run(
        [sys.executable, "-m", "bench.fits", "time_to_quality", "--variants", "warp-speed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "unknown variant(s) ['warp-speed']" in p.stderr and "paper" in p.stderr


def test_fourier_table_runs_an_extra_variant_row_with_its_own_options(tmp_path):
    r = fits.fourier_table(
        [
            "--size",
            "16",
            "--steps",
            "2",
            "--photos",
            "camera",
            "--texts",
            "",
            "--sigmas",
            "5",
            "--encodings",
            "gaussian",
            "--variant",
            "tiny=--model sinekan --width 8 --scale 3",
            "--threads",
            "1",
            "--out-dir",
            str(tmp_path),
            "--plot",
            "",
        ]
    )
    assert r["encodings"] == ["gaussian", "tiny"]
    tiny = next(x for x in r["runs"] if x["encoding"] == "tiny")
    assert "--model sinekan --width 8 --scale 3" in tiny["argv"]
    assert tiny["parameters"] < next(x for x in r["runs"] if x["encoding"] == "gaussian")["parameters"] / 10


def test_a_malformed_variant_is_one_line_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench.fits", "fourier_table", "--variant", "no-options", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 2 and "--variant wants NAME=OPTIONS" in r.stderr and len(r.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_render_cost_times_the_plain_graph_and_the_separable_body_of_each_model(tmp_path):
    from bench import kernels

    r = kernels.main(
        [
            "render_cost",
            "--samples",
            "64",
            "--rounds",
            "1",
            "--out-dir",
            str(tmp_path),
            "--model",
            "mlp=--model mlp --width 16",
            "--model",
            "kan=--model sinekan --width 8 --features 8",
            "--model",
            "raw=--model mlp --encoding none --width 8",
        ]
    )
    m = r["models"]
    assert all(x["plain_us_per_sample"] > 0 for x in m.values())
    assert m["kan"]["body_features"] == 8 * 8 and m["kan"]["body_us_per_sample"] > 0  # 8 projections × first grid 8
    assert "body_us_per_sample" not in m["raw"]  # an MLP on raw coordinates has no sines to separate
    assert (tmp_path / "render_cost.json").exists()
