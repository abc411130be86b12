"""`python -m bench.large_runs` on the bundled model: each variant in a process of its own, its time and the memory
it keeps reported, the ratios against bare onnxruntime per round. Timing is never asserted."""

import json

from bench import large_runs


def test_each_variant_is_timed_with_the_memory_it_keeps(capsys):
    argv = ["--rows", "3000", "--piece", "1000", "--rounds", "2", "--seconds", "0", "--variants", "bare,pieces"]
    assert large_runs.main(argv) == 0
    result = json.loads(capsys.readouterr().out)["result"]
    assert set(result) == {"bare", "pieces"}
    for row in result.values():
        assert row["ms"] > 0 and len(row["ms_rounds"]) == 2 and row["bare_over_this"] > 0
        assert row["kept_mib"] > -50 and row["idle_mib"] > -50  # growths: a trim may give back a little more
    assert result["bare"]["bare_over_this"] == 1.0


def test_an_unknown_variant_is_one_line_and_exit_2(capsys):
    assert large_runs.main(["--variants", "pieces,fastest,pieces:0,pieces:x"]) == 2
    assert capsys.readouterr().err == "error: unknown variants ['fastest', 'pieces:0', 'pieces:x']\n"


def test_a_variant_names_its_piece_size(capsys):
    argv = ["--rows", "3000", "--rounds", "1", "--seconds", "0", "--variants", "pieces:500,pieces:1000"]
    assert large_runs.main(argv) == 0
    assert set(json.loads(capsys.readouterr().out)["result"]) == {"pieces:500", "pieces:1000"}
