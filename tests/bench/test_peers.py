"""`python -m bench.peers` end to end with this service alone (the peers are an optional extra, not in CI):
the real server on the bundled models, every answer checked against onnxruntime, wrk's numbers and the
server's CPU per request in the result file; and `serving`, batching on against off. Timing is never asserted."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peers

ROOT = Path(__file__).resolve().parents[2]
QUICK = [
    "--servers",
    "inr",
    "--rounds",
    "1",
    "--duration",
    "1",
    "--coords-duration",
    "1",
    "--warmup",
    "0",
    "--concurrency",
    "2",
    "--large-coords",
    "3000",
    "--large-concurrency",
    "1",
]
needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install -y wrk)")


def run(argv: list[str]) -> int:
    try:
        return peers.main(argv)
    except SystemExit as e:  # a usage error
        return e.code


@needs_wrk
def test_our_server_answers_like_onnxruntime_and_is_measured_on_every_workload(tmp_path):
    out = tmp_path / "peers.json"
    assert peers.main(["peers", *QUICK, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["load"] for r in rows] == [
        "V2 JSON, 2,000 coordinates",
        "V2 binary, 2,000 coordinates",
        "V2 classify, JSON",
        "v1 classify, JSON",
        "v1 query, 2,000 coordinates",
        "v1 query, 3,000 coordinates, default threads",
        "V2 binary, 3,000 coordinates, default threads",
    ]
    for r in rows:
        assert r["server"] == "inr" and r["concurrency"] == (1 if "default threads" in r["load"] else 2)
        assert r["errors"] == 0 and r["rps"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 and r["cpu_ms_per_req"] > 0
        assert 0 <= r["max_abs_diff"] <= 1e-5 and r["model_cpu_ms"] > 0
    for r in rows[-2:]:  # the large request: against bare onnxruntime with its default threads
        assert r["bare_rps"] > 0 and r["ratio_bare"] > 0 and r["target_bare"] in (0.7, 0.9)
    info = result["machine"]
    assert info["onnxruntime_threads"] == 1 and len(info["load_avg_before"]) == 3 and info["cpu"]
    assert info["peak_rss_mib"]["inr"] > 0 and info["peak_rss_mib_default_threads"]["inr"] > 0
    assert "partial" not in result and "| v1 classify, JSON | 2 | " in peers.side_by_side(rows, {})


@needs_wrk
def test_two_baselines_are_served_beside_ours_on_the_large_request_alone(tmp_path):
    out = tmp_path / "peers.json"
    argv = ["peers-large", *QUICK, "--baseline", str(ROOT), "--baseline", str(ROOT), "--out", str(out)]
    assert peers.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["load"], r["server"]) for r in rows] == [
        (load, server)
        for load in ("v1 query, 3,000 coordinates, default threads", "V2 binary, 3,000 coordinates, default threads")
        for server in ("inr", "base", "base2")
    ]
    assert all(set(r["ratio_baseline"]) == {"base", "base2"} for r in rows if r["server"] == "inr")
    assert "--baseline main" in peers.side_by_side(rows, {"base": "main", "base2": "main"})


@needs_wrk
def test_an_answer_off_onnxruntime_stops_the_run_before_any_timing(tmp_path):
    # v1 JSON rounds to 6 decimals, so with no tolerance at all the check must refuse it
    p = subprocess.run(
        [sys.executable, "-m", "bench.peers", "peers", *QUICK, "--atol", "0", "--out", str(tmp_path / "x.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "error: inr answers v1 classify, JSON" in p.stderr and "away from onnxruntime (tolerance 0)" in p.stderr
    assert not (tmp_path / "x.json").exists()


@needs_wrk
def test_serving_sets_batching_on_beside_off_with_the_floor_and_rows_per_run(tmp_path):
    out = tmp_path / "serving.json"
    argv = ["serving", "--duration", "1", "--rounds", "1", "--concurrency", "2", "--warmup", "0", "--skip", "render"]
    assert peers.main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["load"], r["server"]) for r in rows] == [
        ("v1 classify, JSON", "on"),
        ("v1 classify, JSON", "off"),
        ("v2 infer, binary", "on"),
        ("v2 infer, binary", "off"),
        ("GET /v2/health/live", "on"),
    ]
    assert all(r["errors"] == 0 and r["rps"] > 0 and r["cpu_ms_per_req"] > 0 for r in rows)
    assert all(r["ratio_best_peer"] > 0 for r in rows if r["server"] == "on" and "max_abs_diff" in r)
    assert result["server_metrics"]["off"]["rows_per_run"] == 1.0 <= result["server_metrics"]["on"]["rows_per_run"]
    assert result["machine"]["models"].startswith("repository ") and "| v2 infer, binary | 2 | off |" in (
        peers.rows_table(rows)
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["peers", "--servers", "inr,triton"], "--servers: of inr, inr2, kserve, litserve, bentoml, with inr"),
        (["peers", "--servers", "kserve"], "--servers: of inr, inr2, kserve, litserve, bentoml, with inr"),
        (["peers", "--servers", "inr,kserve", "--peer-python", "/nonexistent/python"], "/nonexistent/python"),
        (["peers", "--models", "/nonexistent"], "--models /nonexistent has no digits model"),
        (["peers", "--rounds", "0"], "expected a positive integer, got '0'"),
        (["peers", "--large-concurrency", "1,0"], "expected a positive integer, got '0'"),
        (["peers-large", "--large-coords", "0"], "peers-large needs --large-coords above 0"),
        (["peers", "--baseline", "/proc"], "No such file or directory: '/proc/service"),
        (["serving", "--servers", "inr"], "unrecognized arguments: --servers inr"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name == "wrk" else None)
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
