"""`python -m bench.collections large_runs` on the bundled model: each variant in a process of its own, its time and
the memory it keeps reported, the ratios against bare onnxruntime per round. Timing is never asserted."""

import json

import pytest

from bench import collections


def run(tmp_path, *argv: str) -> dict:
    assert collections.main(["large_runs", *argv, "--json", str(tmp_path / "runs.json")]) == 0
    return json.loads((tmp_path / "runs.json").read_text())["result"]


def test_each_variant_is_timed_with_the_memory_it_keeps(tmp_path):
    argv = ["--rows", "3000", "--piece", "1000", "--rounds", "2", "--seconds", "0", "--variants", "bare,pieces"]
    result = run(tmp_path, *argv)
    assert set(result) == {"bare", "pieces"}
    for row in result.values():
        assert row["ms"] > 0 and len(row["ms_rounds"]) == 2 and row["bare_over_this"] > 0
        assert row["kept_mib"] > -50 and row["idle_mib"] > -50  # growths: a trim may give back a little more
    assert result["bare"]["bare_over_this"] == 1.0


def test_an_unknown_variant_is_one_line_and_no_run(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: unknown variants \['fastest', 'pieces:0', 'pieces:x'\]$"):
        collections.main(
            ["large_runs", "--variants", "pieces,fastest,pieces:0,pieces:x", "--json", str(tmp_path / "x")]
        )
    assert not (tmp_path / "x").exists()


def test_a_variant_names_its_piece_size(tmp_path):
    result = run(tmp_path, "--rows", "3000", "--rounds", "1", "--seconds", "0", "--variants", "pieces:500,pieces:1000")
    assert set(result) == {"pieces:500", "pieces:1000"}
