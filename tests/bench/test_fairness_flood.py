"""`python -m bench.tiles flood --smoke`: this tree under one flood, the bystander's tiles and the attackers'
answers written to its result file. Timing is never asserted."""

import json

from bench import tiles


def test_the_smoke_run_records_the_bystander_and_every_attacker(tmp_path):
    tiles.main(["flood", "--smoke", "--out-dir", str(tmp_path)])
    (tree,) = json.loads((tmp_path / "render_flood.json").read_text())["trees"]
    (row,) = tree["rows"]
    assert tree["tree"] == "this" and len(row["bystander_statuses"]) == 3
    assert len(row["attackers"]) == tiles.ATTACKERS and all("status" in a for a in row["attackers"])
    assert row["bystander_median_s"] > 0 and row["bystander_p95_s"] >= row["bystander_median_s"]
