"""bench.giants bigimage runs end to end on a crop of the photo (one copy of 640×400): every format written, probe and a
region measured in a child process each, the results file written. Times are never asserted (docs/benchmarks.md,
bigimage)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from bench import giants


def test_the_benchmark_measures_every_format(tmp_path, photo):
    out, results, source = tmp_path / "images", tmp_path / "results", tmp_path / "source.png"
    Image.fromarray(photo[:400, :640]).save(source)
    argv = [
        "bigimage",
        "--out",
        str(out),
        "--source",
        str(source),
        "--megapixels",
        "0.25",
        "--rounds",
        "1",
        "--ops",
        "probe,region",
    ]
    assert giants.main([*argv, "--results", str(results), "--name", "smoke"]) == 0
    result = json.loads((results / "smoke.json").read_text())
    rows = result["rows"]
    assert {r["format"] for r in rows} == set(giants.FILES)
    assert [r["op"] for r in rows].count("to_tiled") == 1
    for r in rows:
        assert "error" not in r, r
        assert r["seconds"] > 0 and r["peak_rss_mib"] >= r["import_rss_mib"] > 0
    probes = [r for r in rows if r["op"] == "probe"]
    assert all(r["what"].startswith("640×400") for r in probes)
    assert next(r for r in probes if r["format"] == "TIFF pyramid")["what"].endswith("2 level(s)")
    assert result["machine"]["libvips"].count(".") == 2


def test_the_images_stay_out_of_the_repository(capsys):
    with pytest.raises(SystemExit) as e:
        giants.main(["bigimage", "--out", str(giants.ROOT / "build" / "big")])
    assert e.value.code == 2
    assert "--out must be outside the repository" in capsys.readouterr().err
