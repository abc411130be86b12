"""`python -m bench.collections collection_warm` end to end: this tree beside a baseline checkout (here: itself), warm
tiles and a render and the large request on each, the ratios and peak resident sets in its result file. Timing is
never asserted."""

import json
from pathlib import Path

from bench import collections

ROOT = Path(__file__).resolve().parents[2]


def test_tiles_and_the_large_request_are_timed_on_each_tree(tmp_path):
    argv = ["collection_warm", "--baseline", str(ROOT), "--tiles", "2", "--rounds", "2", "--render", "256"]
    argv += ["--large-coords", "3000", "--large-seconds", "0", "--json", str(tmp_path / "warm.json")]
    assert collections.main(argv) == 0
    result = json.loads((tmp_path / "warm.json").read_text())["result"]
    for name in ("this", "base"):
        row = result[name]
        assert row["tiles"] == 4 and row["p90_ms"] >= row["median_ms"] > 0 and row["peak_rss_mib"] > 0
        assert row["v1 query JSON, 3,000 ms"] > 0 and row["V2 binary, 3,000 ms"] > 0 and row["/render 256² ms"] > 0
    for key in ("ratio", "ratio /render 256²", "ratio v1 query JSON, 3,000", "ratio V2 binary, 3,000"):
        assert set(result[key]) == {"this_over_base"} and result[key]["this_over_base"] > 0
