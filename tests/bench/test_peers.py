"""`python -m bench.peers` end to end with this service alone (the peers are an optional extra, not in CI):
the real server on the bundled models, every answer checked against onnxruntime, wrk's numbers and the
server's CPU per request in the result file. Timing is never asserted."""

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
]
needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install -y wrk)")


@needs_wrk
def test_our_server_answers_like_onnxruntime_and_is_measured_on_every_workload(tmp_path):
    out = tmp_path / "peers.json"
    assert peers.main([*QUICK, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["load"] for r in rows] == [
        "V2 JSON, 2,000 coordinates",
        "V2 binary, 2,000 coordinates",
        "V2 classify, JSON",
        "v1 classify, JSON",
        "v1 query, 2,000 coordinates",
    ]
    for r in rows:
        assert r["server"] == "inr" and r["concurrency"] == 2 and r["errors"] == 0
        assert r["rps"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 and r["cpu_ms_per_req"] > 0
        assert 0 <= r["max_abs_diff"] <= 1e-5
    info = result["machine"]
    assert info["onnxruntime_threads"] == 1 and len(info["load_avg_before"]) == 3 and info["cpu"]


@needs_wrk
def test_an_answer_off_onnxruntime_stops_the_run_before_any_timing(tmp_path):
    # v1 JSON rounds to 6 decimals, so with no tolerance at all the check must refuse it
    p = subprocess.run(
        [sys.executable, "-m", "bench.peers", *QUICK, "--atol", "0", "--out", str(tmp_path / "x.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "error: inr answers v1 classify, JSON" in p.stderr and "away from onnxruntime (tolerance 0)" in p.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--servers", "inr,triton"], "unknown server(s) ['triton']; choose from inr, inr2, kserve, litserve, bentoml"),
        (["--servers", "kserve"], "--servers must include inr"),
        (
            ["--servers", "inr,kserve", "--peer-python", "/nonexistent/python"],
            "--peer-python /nonexistent/python is not",
        ),
        (["--models", "/nonexistent"], "--models /nonexistent has no astronaut/1/model.onnx"),
        (["--rounds", "0"], "must be positive"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    assert peers.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
