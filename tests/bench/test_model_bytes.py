"""bench.codecs model_bytes small: one real grid fit of a small photo finished as the tree before (uncoded), coded, the
default rounding and a byte target, beside JPEG, WebP and a libvips pyramid; the points it writes and its plot.
Timing is never asserted."""

import json
import subprocess
import sys

from bench import codecs
from tests.fits import photo


def test_model_bytes_reports_bytes_and_psnr_for_every_variant_and_plots_them(tmp_path):
    image = tmp_path / "small.png"
    photo(192, 128, seed=3).save(image)
    argv = ["--photos", str(image), "--work", str(tmp_path / "work"), "--out", str(tmp_path), "--steps", "20"]
    codecs.main(["model_bytes", *argv, "--targets", "4.0,0.01", "--qualities", "50,90"])
    doc = json.loads((tmp_path / "model_bytes.json").read_text())
    (result,) = doc["result"]["photos"]
    rows = {(r["kind"], r.get("variant"), r.get("quality"), r.get("target_bytes")): r for r in result["rows"]}
    assert {k[0] for k in rows} == {"jpeg", "webp", "pyramid", "grid"}
    today, coded = rows[("grid", "today", None, None)], rows[("grid", "coded", None, None)]
    assert today["psnr"] == coded["psnr"] > 20 and coded["bytes"] <= today["bytes"]  # lossless coding
    loose = rows[("grid", "target", None, int(4.0 * 192 * 128))]
    assert loose["bytes"] <= loose["target_bytes"] and loose["native_levels"] >= 1
    impossible = rows[("grid", "target", None, int(0.01 * 192 * 128))]
    assert "the smallest file this grid makes is" in impossible["error"]
    assert all(r["bytes_per_pixel"] > 0 and 10 < r["psnr"] <= 100 for r in result["rows"] if "bytes" in r)
    plotted = subprocess.run(
        [sys.executable, "-m", "bench.codecs", "model_bytes", "--plot-from", str(tmp_path / "model_bytes.json")]
        + ["--plot", str(tmp_path / "plot.png")],
        capture_output=True,
        text=True,
    )
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    table = codecs.bytes_table(doc)
    assert plotted.returncode == 0 and table in plotted.stdout
    assert f"| small.png | coded | {coded['bytes']:,} |" in table and "the smallest file this grid makes" in table
