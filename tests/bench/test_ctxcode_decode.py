"""bench.codecs ctxcode_decode small: the context code's decoders on a synthetic native level, beside the committed
decoder (git HEAD), every decode checked against the table by the harness. Timing is never asserted."""

import json

import numpy as np

from bench import codecs


def test_the_level_is_mostly_zeros_with_ones_near_edges():
    q = codecs.level(0.05, seed=1)
    dev = q.astype(int) - 60
    assert q.shape[:2] == (1, 1) and abs(q.size - 50_000) < 500
    assert 0.6 < (dev == 0).mean() < 0.95 and 0.03 < (np.abs(dev) == 1).mean() < 0.35


def test_every_decoder_is_timed_on_every_size(tmp_path):
    argv = ["ctxcode_decode", "--sizes", "0.01,0.03", "--repeats", "2", "--baseline", "HEAD", "--out", str(tmp_path)]
    assert codecs.main(argv) == 0
    doc = json.loads((tmp_path / "ctxcode_decode.json").read_text())
    assert doc["repeats"] == 2 and [round(r["megapixels"], 2) for r in doc["rows"]] == [0.01, 0.03]
    for row in doc["rows"]:
        assert row["bytes"] > 0 and row["this tree, numpy"] > 0 and row["baseline HEAD"] > 0
        assert row["this tree, numpy cpu"] > 0 and row["baseline HEAD cpu"] > 0
