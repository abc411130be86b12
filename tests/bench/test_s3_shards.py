"""`python -m bench.s3 s3_shards` end to end on a few models: a real S3 server, two replicas on the bucket and two on
a folder, each pair behind the nginx template. Timing is never asserted; what the issue asks of the result is: each
model answered by one replica, no GET after a restart for what the caches hold, each cache under its budget after
the load."""

import json
import shutil
from pathlib import Path

import pytest

from bench import s3

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_first_tiles_restart_and_budgets_through_nginx(tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = [
        "s3_shards",
        "--from",
        str(ROOT / "models" / "astronaut"),
        "--models",
        "4",
        "--rounds",
        "1",
        "--per-round",
        "2",
    ]
    assert s3.main([*argv, "--cache-share", "0.8", "--tmp", str(tmp_path), "--json", str(out)]) == 0
    result = json.loads(out.read_text())["result"]
    tiles = result["first_tile"]
    assert len(tiles["s3_s"]) == len(tiles["local_s"]) == 2 and tiles["ratio"] > 0
    assert result["load"]["tiles"] == 4
    shards = result["shards"]
    assert shards["overlap"] == 0 and shards["answered_all"], shards
    budget = result["cache_budget_bytes"]
    # At this size a replica fetches its models within seconds of each other: one just fetched is spared for 5 s
    # (modelrepo/diskcache.py), so the cache may pass its budget for those seconds; it is trimmed back after them.
    assert result["disk_during"]["samples"] > 0
    assert all(used <= budget for used in result["disk_after_load"].values()), result["disk_after_load"]
    for name in ("s3-0", "s3-1"):
        restart = result["restart"][name]
        assert restart["served_by_it"] == restart["models_in_cache"]
        assert restart["requests_at_start"]["GET"] == 0 and restart["requests_for_the_tiles"]["GET"] == 0, restart
        assert result["disk_after"][name]["du_bytes"] <= budget
    assert sum(result["restart"][n]["models_in_cache"] for n in ("s3-0", "s3-1")) > 0
    assert not list(tmp_path.glob("inr-bench-s3-*")), "the bench leaves nothing behind"
