"""bench.digits paper, small: the learning rate chosen on the validation slice, runs over seeds scored once on the
test split with their inference timings, a resumed sweep that skips finished runs, the table and the plot.
Timing is never asserted."""

import json

from bench import digits
from tests.training.digits.conftest import render_glyphs, write_split


def test_lr_choice_runs_resume_and_report(tmp_path):
    data = tmp_path / "glyphs"
    data.mkdir()
    write_split(data, "train", *render_glyphs(30, seed=1))
    write_split(data, "test", *render_glyphs(10, seed=2))
    results = tmp_path / "paper.jsonl"
    common = ["--data-dir", str(data), "--results", str(results), "--models", "sinekan,mlp", "--epochs", "2"]
    digits.main(["paper", "lr", *common, "--lr-width", "8"])
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["kind"], r["model"]) for r in rows] == [("lr", "sinekan")] * 3 + [("lr", "mlp")] * 3
    assert all("test_accuracy" not in r for r in rows)  # choosing the rate never reads the test split
    best = max((r for r in rows if r["model"] == "mlp"), key=lambda r: r["val_accuracy"])["lr"]

    argv = ["run", *common, "--widths", "4,8", "--seeds", "0,1", "--batches", "1,4", "--plot", str(tmp_path / "p.png")]
    summ = digits.main(["paper", *argv])
    runs = [json.loads(line) for line in results.read_text().splitlines()][6:]
    assert len(runs) == 8 and {r["lr"] for r in runs if r["model"] == "mlp"} == {best}
    for r in runs:
        assert 0 <= r["test_accuracy"] <= 1 and 1 <= r["epoch_kept"] <= 2
        assert r["val_accuracy"] == max(r["val_history"])  # the epoch kept is the best on validation
        assert set(r["inference_us"]["onnxruntime"]) == {"1", "4"} and r["inference_us"]["torch"]["4"] > 0
    assert [(s["model"], s["width"], s["seeds"]) for s in summ] == [
        ("sinekan", 4, 2),
        ("mlp", 4, 2),
        ("sinekan", 8, 2),
        ("mlp", 8, 2),
    ]
    assert (tmp_path / "p.png").stat().st_size > 10_000
    digits.main(["paper", *argv])  # everything done: nothing trains again
    assert len(results.read_text().splitlines()) == 14
    digits.main(["paper", "retime", "--results", str(results), "--rounds", "2", "--batches", "1,4"])
    timed = [json.loads(line) for line in results.read_text().splitlines()][14:]
    assert [(t["kind"], t["rounds"], len(t["rounds_us"])) for t in timed] == [("timing", 2, 2)] * 4
    summ = digits.main(["paper", "report", "--results", str(results)])
    mlp8 = next(s for s in summ if (s["model"], s["width"]) == ("mlp", 8))
    assert (
        mlp8["inference_us"]["onnxruntime"]["4"][0]
        == next(t for t in timed if (t["model"], t["width"]) == ("mlp", 8))["inference_us"]["onnxruntime"]["4"]
    )  # the report reads the interleaved re-timing
    table = digits.table_md(summ)
    assert table.count("\n") == 5 and "(2 seeds)" in table and "ORT b4 µs" in table
