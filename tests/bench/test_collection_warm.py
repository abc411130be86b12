"""`python -m bench.collection_warm` end to end: this tree beside a baseline checkout (here: itself), warm tiles and
a render and the large request on each, the ratios and peak resident sets in its report. Timing is never asserted."""

import json
from pathlib import Path

from bench import collection_warm

ROOT = Path(__file__).resolve().parents[2]


def test_tiles_and_the_large_request_are_timed_on_each_tree(capsys):
    argv = ["--baseline", str(ROOT), "--tiles", "2", "--rounds", "2", "--render", "256", "--large-coords", "3000"]
    argv += ["--large-seconds", "0"]
    assert collection_warm.main(argv) == 0
    result = json.loads(capsys.readouterr().out)["result"]
    for name in ("this", "base"):
        row = result[name]
        assert row["tiles"] == 4 and row["p90_ms"] >= row["median_ms"] > 0 and row["peak_rss_mib"] > 0
        assert row["v1 query JSON, 3,000 ms"] > 0 and row["V2 binary, 3,000 ms"] > 0 and row["/render 256² ms"] > 0
    for key in ("ratio", "ratio /render 256²", "ratio v1 query JSON, 3,000", "ratio V2 binary, 3,000"):
        assert set(result[key]) == {"this_over_base"} and result[key]["this_over_base"] > 0
