"""`python -m bench.observe soak --preset ci`: the mixed wrk load runs end to end against the real server on the
bundled models and reports errors by kind, latencies per request type and RSS. Speed is not asserted;
errors are: the mixed load must not lose a request."""

import json
import shutil

import pytest

from bench import observe

pytestmark = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")


def test_the_ci_soak_loses_no_request(tmp_path):
    assert observe.main(["soak", "--preset", "ci", "--out-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "soak.json").read_text())
    (run,) = result["runs"]
    assert run["errors_total"] == 0, run["errors"]
    assert set(run["kinds"]) == {"classify", "query", "render", "viewer"}
    for kind in ("classify", "query", "render"):
        r = run["kinds"][kind]
        assert r["requests"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
    assert run["rss_warm_mib"] > 0 and run["rss_end_mib"] > 0
    assert "| default | query |" in observe.soak_table(result["runs"])
