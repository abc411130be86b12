"""bench.giants' `overhead` on a real block model (`fit-image --block-size` on a small photo): what the overview and
the overlaps cost beside the blocks' cores, from the version's files and fit times. Timing is never asserted."""

import json
import subprocess
import sys
from pathlib import Path

from bench.giants import overhead
from fitstore import PRESETS
from tests.fits import photo

ROOT = Path(__file__).resolve().parents[2]


def test_overhead_counts_the_overview_and_what_each_block_has_outside_its_core(tmp_path):
    image, out = tmp_path / "wide.png", tmp_path / "wide"
    photo(100, 60, seed=2).save(image)
    argv = ["--image", str(image), "--out", str(out), "--block-size", "40", "--block-overlap", "8", "--steps", "20"]
    argv += ["--protocol", "full", "--no-progress", *PRESETS["grid"]["argv"]]
    done = subprocess.run([sys.executable, "-m", "training", "fit-image", *argv], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    got = overhead(out / "1")
    assert got["overview"] == [25, 15], "a quarter of the image's side"
    # 3 × 2 blocks of 40 by 30 with 8 px of overlap on their inner sides: their crops are 1.4–1.9× their cores
    assert 0.3 < got["overview_and_overlaps_bytes"] < 2 and 0 < got["overview_and_overlaps_fit_seconds"] < 3
    printed = subprocess.run(
        [sys.executable, "-m", "bench.giants", "overhead", str(out / "1")], cwd=ROOT, capture_output=True, text=True
    )
    assert printed.returncode == 0 and json.loads(printed.stdout) == got
