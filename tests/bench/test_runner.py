"""`python -m bench`: a scenario run through the runner lands in the store, the store imports result files once,
and the report regenerates a page's blocks from it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import FAMILIES, SCENARIOS, store
from bench.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_scenario_names_a_harness_and_a_family():
    for sc in SCENARIOS.values():
        assert sc.family in FAMILIES
        assert (ROOT / "bench" / f"{sc.module}.py").exists(), sc.name
    out = bench("list")
    assert out.returncode == 0 and "peers*" in out.stdout and "digits (" in out.stdout


def test_a_scenario_runs_through_the_runner_into_the_store_and_the_report(tmp_path):
    db = tmp_path / "store.jsonl"
    harness = ["--hidden", "8", "--batches", "1,8", "--repeats", "1", "--out-dir", str(tmp_path), "--plot", ""]
    out = bench("sinekan_speed", "--store", str(db), "--watch", str(tmp_path), "--", *harness)
    assert out.returncode == 0, out.stderr
    [row] = store.read(db)
    assert row["scenario"] == "sinekan_speed" and row["family"] == "fits" and row["run"] == "sinekan_speed"
    assert row["command"].startswith("python -m bench sinekan_speed --store")
    assert row["commit"] and row["date"].endswith("UTC") and row["machine"]["lscpu"]["cpu"]
    assert row["figures"] == json.loads((tmp_path / "sinekan_speed.json").read_text())
    # the result file is already in the store: importing the folder adds nothing
    assert store.import_results(tmp_path, db) == 0
    doc = tmp_path / "page.md"
    doc.write_text("# Prose\n\n<!-- bench: sinekan_speed -->\nstale\n<!-- /bench -->\n\nMore prose.\n")
    assert main(["report", "--doc", str(doc), "--store", str(db)]) == 0
    page = doc.read_text()
    assert "stale" not in page and page.startswith("# Prose") and page.endswith("More prose.\n")
    assert "| [8] | 8 |" in page and row["commit"] in page and "python -m bench sinekan_speed" in page


def test_import_keeps_each_result_once_with_its_own_date(tmp_path):
    results, db = tmp_path / "results", tmp_path / "store.jsonl"
    results.mkdir()
    (results / "peers-issue9.json").write_text(json.dumps({"machine": {"date": "2026-12-01 10:00 UTC"}, "rows": []}))
    (results / "digits_paper.jsonl").write_text('{"kind": "run", "seed": 0}\n{"kind": "run", "seed": 1}\n')
    names = ["peers", "peers_loads", "digits_paper"]
    assert store.import_results(results, db, names) == 3
    rows = store.read(db)
    assert [(r["scenario"], r["run"]) for r in rows] == [
        ("peers", "peers-issue9"),
        ("digits_paper", "digits_paper"),
        ("digits_paper", "digits_paper"),
    ]
    assert rows[0]["date"] == "2026-12-01 10:00 UTC" and rows[2]["figures"] == {"kind": "run", "seed": 1}
    assert store.import_results(results, db, names) == 0
    with open(results / "digits_paper.jsonl", "a") as f:  # a long run appends a line: only it comes in
        f.write('{"kind": "run", "seed": 2}\n')
    assert store.import_results(results, db, names) == 1
    (results / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json:1: not JSON"):
        store.import_results(results, db, names)


def test_a_block_naming_a_run_the_store_lacks_is_one_line_and_no_page_is_written(tmp_path, capsys):
    db = tmp_path / "store.jsonl"
    store.append([store.make_row("rd", "rd", {"table": "| a |"}, "", date="2026-12-07 10:00 UTC", commit="c")], db)
    good, bad = tmp_path / "a.md", tmp_path / "b.md"
    good.write_text("<!-- bench: latest -->\nold\n<!-- /bench -->\n")
    bad.write_text("<!-- bench: peers peers-nowhere -->\nkept\n<!-- /bench -->\n")
    with pytest.raises(SystemExit) as e:
        main(["report", "--doc", str(good), "--doc", str(bad), "--store", str(db)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "block 'peers peers-nowhere' has no row" in err
    assert "old" in good.read_text() and "kept" in bad.read_text()  # all pages or none
    assert main(["report", "--doc", str(good), "--store", str(db)]) == 0 and "| bytes | rd |" in good.read_text()
    db.write_text("not json\n")
    with pytest.raises(SystemExit) as e:
        main(["report", "--doc", str(good), "--store", str(db)])
    assert e.value.code == 2 and "store.jsonl:1: not JSON" in capsys.readouterr().err


def test_a_git_ref_baseline_is_exported_once_and_passed_to_the_harness(tmp_path):
    out = bench("floor", "--baseline", "HEAD", "--rounds", "2", "--trees", str(tmp_path), "--dry-run")
    assert out.returncode == 0, out.stderr
    tree = tmp_path / store.git("rev-parse", "--short=12", "HEAD")
    assert f"-m bench.latency floor --baseline {tree} --rounds 2" in out.stdout
    assert (tree / "service" / "__main__.py").exists() and (tree / "bench" / "latency.py").exists()
    assert [p.name for p in tmp_path.iterdir()] == [tree.name]  # no half-exported folder left beside it
    again = bench("peers", "--baseline", "HEAD", "--baseline", str(tree), "--trees", str(tmp_path), "--dry-run")
    assert f"--baseline {tree} --baseline {tree}" in again.stdout


def test_a_folder_baseline_inside_this_checkout_is_not_taken_for_its_commit(tmp_path):
    from bench.__main__ import checkout

    inside = ROOT / "bench"  # a folder of this checkout, not a checkout of its own
    assert checkout(str(inside), tmp_path) == (inside.resolve(), "unknown")
    assert checkout(str(ROOT), tmp_path)[1].split("+")[0] == store.git("rev-parse", "--short=12", "HEAD")


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuch"], "unknown scenario 'nosuch'"),
        (["roofline", "--baseline", "HEAD"], "takes at most 0 --baseline"),
        (["floor", "--baseline", "HEAD", "--baseline", "HEAD~1"], "takes at most 1 --baseline"),
        (["peers", "--baseline", "no-such-ref-xyz"], "neither a folder nor a commit"),
        (["peers", "--baseline=--output=/tmp/x"], "neither a folder nor a commit"),
        (["peers", "--rounds", "0"], "needs at least 1"),
        (["roofline", "--rounds", "3"], "has no rounds"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*args, "--store", str(tmp_path / "s.jsonl"), "--dry-run"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()


def test_the_latest_row_is_the_latest_date_and_the_store_table_lists_each_scenario_once(tmp_path):
    db = tmp_path / "store.jsonl"
    day = {"cpu": "AMD EPYC", "cores": 2}
    rows = [
        store.make_row("peers", "peers-b", {"n": 2}, "", date="2026-12-07 10:00 UTC", commit="bbb", machine=day),
        store.make_row("peers", "peers-a", {"n": 1}, "", date="2026-12-01 10:00 UTC", commit="aaa", machine=day),
        store.make_row("rd", "rd", {"n": 3}, "", date="2026-12-02 10:00 UTC", commit="ccc", machine=day),
    ]
    store.append(rows, db)
    got = store.read(db)
    assert store.latest(got, "peers")["run"] == "peers-b" and store.latest(got, "peers", "peers-a")["commit"] == "aaa"
    assert store.latest(got, "nosuch") is None
    table = store.latest_table(got)
    assert "| serving | peers | `peers-b` | 2026-12-07 10:00 UTC | AMD EPYC, 2 cores | `bbb` |" in table
    assert table.index("| serving | peers") < table.index("| bytes | rd") and table.count("| peers |") == 1


def test_a_harness_that_fails_stores_nothing_and_its_exit_code_is_the_runners(tmp_path):
    db = tmp_path / "store.jsonl"
    out = bench("sinekan_speed", "--store", str(db), "--watch", str(tmp_path), "--", "--no-such-option")
    assert out.returncode == 2 and "nothing stored" in out.stderr and not db.exists()
